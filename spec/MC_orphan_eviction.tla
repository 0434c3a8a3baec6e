------------------------- MODULE MC_orphan_eviction -------------------------
(* Finding (docs/model.md, traces/orphan_eviction.md): the reference evicts from
   L1 an unbacked write-through node whose children are all L2-only, deleting it
   and orphaning them; their L2 objects stay allocated, owned by no node.
   UnbackedEvict = "reference" models that, and HostPages (invariant 6) fails. A
   one-page prompt caches node [1]; a second prompt [1, 2] matches it and adds
   [2] below it, which is backed up and evicted from L1; [1], never backed, is
   then the first device victim. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0],
               [pages |-> <<1, 2>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 4
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
