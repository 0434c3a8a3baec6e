------------------------------ MODULE MC_reference ------------------------------
(* The `reference` model: the constants of kvsm's built-in config `reference`
   (kvsm/configs/reference.toml), the cache as production runs it. Every
   fidelity knob at the reference's value (CommitEntry, UnbackedEvict,
   DurableSplit), prepared write-through backups and an L3 disk of two pages on
   each of two ranks; two requests for the pages [1, 2], one alive at a time,
   the second matching [1] and splitting the first one's node after one page.
   Every counter is bounded: MaxRequests, and MaxDiskFaults = -1 (no DiskFail;
   TLC's config syntax has no negative literal, hence the definition below), so
   the graph is finite: conform compares it whole. Safety only (the reference's
   commit calls need not pair, and a round that never completes is invariant
   12's finding, not a liveness one). docs/findings.md lists what TLC finds here
   and the knob value that removes each finding. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0]}

MC_NoDiskFault == -1

\* Next quantifies over node ids; this model never creates more than these, which
\* MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
