-------------------------------- MODULE MC_l3_no_min --------------------------------
(* The model of the injected defect l3_no_min (docs/defects.md), smaller than
   l3: one two-page prompt, two requests one alive at a time, a two-page disk per
   rank and one disk fault. A reload's claim is decided by every rank; without the
   MIN over the ranks' counts a rank claims what its own disk holds. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
