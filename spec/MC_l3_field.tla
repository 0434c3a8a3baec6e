-------------------------------- MODULE MC_l3_field --------------------------------
(* The MC_reload_stale_anchor model with two requests instead of three, for
   `kvsm conform --bug` of the L3 field bugs (docs/defects.md, "Field bugs"):
   lease_expiry_free, reload_fail_double_free and failed_store_visible. Their
   counterexamples need two requests at most: one node backed, spilled and
   evicted, then the second request's reload (or the spill's failed write). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0], [pages |-> <<1, 2>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
