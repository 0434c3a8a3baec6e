-------------------------------- MODULE KVView --------------------------------
(* What a model checker may forget of a state: `StampView`, a VIEW under which
   TLC keeps one state of each class of states that no step and no invariant
   can tell apart. It is not part of the spec (KVCache does not use it); the
   safety-only models (MC_ci, MC_l3deep) check under it.

   Access stamps. The clock and the nodes' `touched` stamps are read only by
   comparing them: the victim orders compare stamps with each other
   (VictimKey), Counts compares each stamp with the clock, and every step that
   stamps sets the new stamps and the new clock to the clock plus offsets of at
   least 1 that the rest of the state decides. So two states that are equal
   but for their stamps and clock, and whose stamps and clock are in the same
   order (ties included), enable the same steps, satisfy the same invariants,
   and step to states that are again equal in the same sense: the view writes
   each stamp and the clock as its rank among the values of the stamps and the
   clock (the number of smaller values).

   Hit counts. A node's `hits` is read only as `hits >= 2` (Protected) and
   `hits >= WriteThreshold` (a write-through backup), and a step only adds to
   it or copies it (a split), so every count at or above both thresholds
   behaves alike: the view caps counts at the larger threshold.

   Under the defect wallclock_tiebreak a rank reads a stamp through arithmetic
   ((touched + v) \div 2), which ranks do not preserve, and the view is the
   whole state.

   A VIEW that merged states some step or invariant tells apart would hide
   violations; tests/test_view.py checks on the Python model's complete graph
   that the view is a bisimulation that every invariant respects, and that TLC
   counts as many classes as the Python model has. Liveness is not checked
   under it: TLC's liveness checking under a VIEW is not known to be sound. *)
EXTENDS KVCache

HitCap == IF WriteThreshold > 2 THEN WriteThreshold ELSE 2

StampView ==
    IF Bug = "wallclock_tiebreak"
    THEN vars
    ELSE LET values == {nodes[n].touched : n \in DOMAIN nodes} \cup {clock}  \* the stamps and the clock
             Rank(x) == Cardinality({y \in values : y < x})
         IN <<[n \in DOMAIN nodes |-> [nodes[n] EXCEPT !.touched = Rank(@),
                                                    !.hits = IF @ > HitCap THEN HitCap ELSE @]],
              next_id, Rank(clock), requestVars, deviceVars, hostVars, backupVars, loadVars,
              spill_queue, l3Vars, diverged, halted>>
=============================================================================
