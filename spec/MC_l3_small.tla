------------------------------ MODULE MC_l3_small ------------------------------
(* The `l3-small` model: the constants of kvsm's built-in config `l3-small`
   (kvsm/configs/l3-small.toml), the smallest model with every L3 step, for
   `kvsm conform` in the default test suite. Two ranks, one device page per
   lane, a one-page host pool and a one-page disk per rank; two requests from
   the prompts [1] and [1, 2], one alive at a time: [1] is backed up, committed,
   spilled and evicted, and [1, 2] misses it and reloads it. MaxDiskFaults = -1
   (no DiskFail; TLC's config syntax has no negative literal, hence the
   definition below), so every counter is bounded (`l3` has the faults). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0],
               [pages |-> <<1, 2>>, out_pages |-> 0]}

MC_NoDiskFault == -1

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
