------------------------------- MODULE MC_write_back_sync -------------------------------
(* The reference's write-back eviction (WriteBackEvict = "sync", Policy = "write_back"):
   a load-back whose lanes are short writes its unbacked device victim back inside its
   own step, evicting host leaves to fit. Two device pages and two host pages: a
   two-page node backed and off L1, a one-page node on L1 unbacked, and a request that
   loads the first back; the victim's write-back finds the pool full of the very node
   the load restores. Under loadback_evicts_own_host (docs/defects.md) it evicts it. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<3>>, out_pages |-> 0],
               [pages |-> <<1, 2, 5>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 8
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
