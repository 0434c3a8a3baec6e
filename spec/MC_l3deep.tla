------------------------------ MODULE MC_l3deep ------------------------------
(* A by-hand model of the L3 tier, too large for CI: the `l3` model with a third
   request, a one-entry spill queue and no disk fault. A third request is what
   the two L3 scenarios that `l3` lacks need: a reload whose anchor changes while
   it is in flight (aborted at admit) and a reload after a split that moved the
   pages' owners (claim lowered). Safety only (MC_l3deep.cfg has no PROPERTIES);
   spec/README.md records how far TLC got. Run it with
   `kvsm check --config spec/MC_l3deep.cfg --workers N`. *)
EXTENDS KVView

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

\* This config never creates more node ids than these, which MC_NodeIdsCovered
\* checks in every state.
MC_NodeIds == 1 .. 9
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
