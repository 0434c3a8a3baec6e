------------------------------- MODULE MC_deep -------------------------------
(* The `deep` model: the ci model's prompts and device lanes with a three-page host
   pool and two requests alive at once, so that requests share, lock and split
   nodes while others evict, load back and back them up. Too large for CI;
   spec/README.md records its figures. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0],
               [pages |-> <<4, 5>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
