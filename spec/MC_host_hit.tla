------------------------------- MODULE MC_host_hit -------------------------------
(* The `load_uaf` model (two requests, two ranks, two device pages per lane, two
   host pages) with CarryHostHit: a match records its host hit for a later
   load-back, as the reference's match does (`last_host_node`). Between the
   second request's Match and its LoadBack the host victims are evicted one by
   one; the pin its match took keeps its hit on L2, and under host_hit_unpinned
   (vLLM issue 39702, docs/defects.md) the hit is evicted under the request that
   carries it: 6 HostPages at the 15th step. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
