------------------------- MODULE MC_commit_early_return -------------------------
(* The finding of `commit_call = "reference"` (docs/model.md, Fidelity to the
   reference): a rank whose own ack queue is empty returns early from the commit
   collective's call that another rank entered, and invariant 12 (Collectives)
   breaks. One request of one page is enough: it is inserted and backed up, one
   rank finishes its copy and enters the MIN, the other has not and returns. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 2
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
