--------------------------- MODULE MC_reference_write_back ---------------------------
(* The `reference-write-back` model: the constants of kvsm's built-in config
   `reference-write-back` (kvsm/configs/reference-write-back.toml), the reference
   under its write_back policy. Every fidelity knob at the reference's value, and
   a load-back's write-back eviction in the reference's own order (WriteBackEvict =
   "deferred": a victim written back is evicted after the others, and every victim
   is re-checked first), and evict()'s own write-back of an unbacked device victim
   (EvictWriteBack = "sync"). No prepared backups and no L3. Two ranks with one device
   page a lane and a four-page host pool; four arrivals, one alive at a time, drawn
   from the chains [1], [1, 2] and [3, 4], [3, 4, 5]: a match that splits a node
   leaves two unbacked nodes on L1, one above the other, and a load-back of the
   other chain must evict both. Every counter is bounded (MaxRequests; no L3, so
   no disk fault), so the graph is finite: conform compares it whole. Safety only,
   as MC_reference. docs/findings.md lists what TLC finds here. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0], [pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<3, 4>>, out_pages |-> 0], [pages |-> <<3, 4, 5>>, out_pages |-> 0]}

MC_NoDiskFault == -1

\* Next quantifies over node ids; this model never creates more than these, which
\* MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 10
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
