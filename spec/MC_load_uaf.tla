------------------------------- MODULE MC_load_uaf -------------------------------
(* The `loads` model with two requests instead of three: the second request loads
   back the first one's node, and the copies of that load land one rank at a time,
   which is where load_uaf releases the load's lock too early. About a twentieth
   of the `loads` graph, so `kvsm conform --bug load_uaf` compares the mutant in
   seconds (docs/defects.md). The third request of `loads` is what reuses the freed
   page; the bytes that go wrong are shown there. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
