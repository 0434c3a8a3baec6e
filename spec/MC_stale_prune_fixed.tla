------------------------ MODULE MC_stale_prune_fixed ------------------------
(* MC_stale_prune_l3 under StalePrune = "fixed" (MC_stale_prune_fixed.cfg): the
   same prompts and bounds. *)
EXTENDS MC_stale_prune_l3
=============================================================================
