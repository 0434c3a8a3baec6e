------------------------- MODULE MC_orphan_eviction -------------------------
(* Finding 3 (docs/findings.md, traces/finding-orphan-eviction.txt): the
   reference evicts from L1 an unbacked write-through node whose children are
   all L2-only, taking it out of the tree and orphaning them; they keep their L2
   objects, no match reaches them, and host eviction frees them.
   UnbackedEvict = "reference" models that (a husk stays in the evicted node's
   place) and every invariant holds: the finding is a waste. A one-page prompt
   caches node [1]; a second prompt [1, 2] matches it and adds [2] below it,
   which is backed up and evicted from L1; [1], never backed, is then the first
   device victim. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0],
               [pages |-> <<1, 2>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 4
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
