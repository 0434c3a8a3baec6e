--------------------------- MODULE MC_stale_prune ---------------------------
(* The reference's stale-tail prune (docs/model.md, PruneStaleTail): a key that
   leaves a node inside a page splits it at the page floor and deletes the lower
   part with its subtree, device pages and objects, unless a node of the subtree
   is locked, pinned by a spill or has a pending backup. [1, 2, 3] is cached,
   backed, spilled and reloaded; [1, 4] and [1, 2, 5] cut inside its nodes, so
   the prune can meet a queued or in-flight spill, a reload's anchor, a load in
   flight and a backup in flight. StalePrune = "reference" (MC_stale_prune.cfg)
   and "fixed" (MC_stale_prune_fixed.cfg). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2, 3>>, out_pages |-> 0],
               [pages |-> <<1, 4>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
