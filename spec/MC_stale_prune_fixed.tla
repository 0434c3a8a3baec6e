------------------------ MODULE MC_stale_prune_fixed ------------------------
(* MC_stale_prune_l3 under StalePrune = "fixed" (MC_stale_prune_fixed.cfg): the
   same prompts and bounds; the prune also spares a subtree that a queued or
   in-flight spill, or a reload's anchor, refers to. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
