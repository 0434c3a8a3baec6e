--------------------------- MODULE MC_stale_prune ---------------------------
(* The reference's stale-tail prune (docs/model.md, PruneStaleTail) on L1 and
   L2, two ranks, one request alive at a time: [1, 2] is cached and backed,
   [1, 3]'s match key [1] leaves it after one page: the prune deletes device
   pages and objects, and a backup in flight refuses it. StalePrune = "reference" (MC_stale_prune.cfg); the L3
   cases are MC_stale_prune_l3 and MC_stale_prune_fixed. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
