-------------------------- MODULE MC_stale_prune_l3 --------------------------
(* The reference's stale-tail prune (docs/model.md, PruneStaleTail) with L3,
   on one rank: [1, 2] is cached, backed and spilled, and [1, 3]'s
   match key [1] leaves it after one page, so the prune meets a queued spill
   entry, a spill in flight, a spill's pin and a backup in flight.
   StalePrune = "reference" (MC_stale_prune_l3.cfg) and "fixed"
   (MC_stale_prune_fixed.cfg); both are clean (258,443 states, about 3 minutes). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
