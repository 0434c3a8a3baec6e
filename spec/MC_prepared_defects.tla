----------------------------- MODULE MC_prepared_defects -----------------------------
(* The injected defects on the production write-through path (docs/defects.md):
   prepared backups (PreparedBackups) and no other backup (WriteThreshold is
   out of reach of three requests, so Reserve never starts one), the commit
   collective as one step (CommitEntry = "atomic": its rounds are not what these
   defects are about), one device page a lane and a two-page host pool,
   prompts [1], [2] and [1, 3]. Each
   defect is caught where the prepared path goes through it: local_host_alloc
   and wallclock_tiebreak at Prepare's evict-to-fit (a one-page prepare, [3]
   below [1], against a full pool; two host leaves touched one access apart,
   the older of the higher id), double_free at the rollback of a prepared
   backup (Abort). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0],
               [pages |-> <<2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 9
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
