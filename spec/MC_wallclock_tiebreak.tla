-------------------------------- MODULE MC_wallclock_tiebreak --------------------------------
(* The model of the injected defect wallclock_tiebreak (docs/defects.md), where
   ci cannot reach it: two single-page nodes in one device lane, touched one
   access apart with the older one of the higher id, so that a rank whose wall
   clock puts both accesses in one tick orders them by id and the other rank by
   time. Three single-page requests, one alive at a time, two device pages per
   lane, a one-page host pool. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0], [pages |-> <<2>>, out_pages |-> 0], [pages |-> <<3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
