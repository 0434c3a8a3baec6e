------------------------------- MODULE MC_loads -------------------------------
(* The `loads` model: the constants of kvsm's built-in config `loads`
   (kvsm/configs/loads.toml). A node backed on L2 and evicted from L1 is loaded
   back by a request that may abort while the copies are in flight; the other
   prompt's node fits beside the loading one, so inserts, finishes and device
   evictions run while a load is in flight. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
