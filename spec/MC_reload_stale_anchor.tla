-------------------------------- MODULE MC_reload_stale_anchor --------------------------------
(* The model of the injected defect reload_stale_anchor (docs/defects.md), where
   l3 cannot reach it: a reload's anchor must leave the tree while the reload is
   in flight. One rank (the defect needs no second one), two device pages, a
   one-page host pool and a one-page disk; three requests, one alive at a time:
   [1, 2] is cached, [1] splits it so that [2] hangs below the anchor [1], [2] is
   backed up, spilled and evicted, and the third request's miss below [1] is
   reloaded while [1] is evicted. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0], [pages |-> <<1, 2>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
