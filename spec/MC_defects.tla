-------------------------------- MODULE MC_defects --------------------------------
(* The `ci` model with two requests instead of three: an eighth of ci's graph,
   and every injected defect that ci reaches is reached here too (double_free,
   evict_pending, split_pending, duplicate_ack, local_host_alloc), at the same
   depth as in ci, so `kvsm conform --bug` compares each mutant on it in seconds
   (docs/defects.md). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0],
               [pages |-> <<4, 5>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 5
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
