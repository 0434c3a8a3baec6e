--------------------------- MODULE MC_reference_defects ---------------------------
(* The injected defects under the reference profile (docs/defects.md, the matrix's
   `reference` column): the `reference` model (MC_reference: prepared write-through
   backups, an L3 disk of two pages on each of two ranks, two requests for the
   pages [1, 2], one alive at a time, no disk fault) with the knobs of the four
   findings of docs/findings.md at their fixed value (CommitEntry, OwnDiskDurable,
   UnbackedEvict, DurableSplit) and the two knobs of no finding (AckTiming,
   StalePrune) at the reference's value. Without a defect TLC finds it clean, so a
   violation under a defect is the defect's own, not a finding's. Safety only, as
   MC_reference. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0]}

MC_NoDiskFault == -1

\* Next quantifies over node ids; this model never creates more than these, which
\* MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
