------------------------------- MODULE KVCache -------------------------------
(***************************************************************************)
(* A multi-rank tiered KV cache: every rank has a lane of device pages     *)
(* (L1), all ranks share one host pool (L2), and every rank has a disk of  *)
(* its own (L3, addressed by page hash). The KV of token prefixes lives in *)
(* a radix tree that every rank holds identically; the only cross-rank     *)
(* agreements are MINs (and ANDs) over per-rank progress counters: at      *)
(* Commit (the completion of the commit collective every rank enters with  *)
(* CommitCall), SpillAck and ReloadAdmit. ReloadReserve's claim is a MIN   *)
(* too, of what each rank's disk holds: a decision (as evictions are), not *)
(* an agreement, since no rank reads after it what another rank wrote.     *)
(*                                                                         *)
(* The contract is ../shared/design/MODEL.md. The pure Python model in     *)
(* kvsm/ implements the same rules with the same names; `kvsm conform`     *)
(* checks that both produce the same state graph, `kvsm validate` that a   *)
(* log is a behaviour of this spec. docs/model.md records every choice.    *)
(*                                                                         *)
(* This module holds the state, the actions and the properties; the tree,  *)
(* page and planner operators the actions are built from are in KVTree,    *)
(* which it extends.                                                       *)
(*                                                                         *)
(* Units: a key is a sequence of page symbols (one symbol stands for the P *)
(* tokens of one page). The ghost content of a page is the prefix of page  *)
(* symbols whose KV it holds, up to and including the page itself; the     *)
(* empty prefix marks a poisoned (freed) page, since no page ever holds    *)
(* it. The Python model names the same content by a chained hash. A page  *)
(* of namespace k > 0 holds its prefix after the virtual symbol -k        *)
(* (NsPre). A page hash (L3's address) is that content, or under L3Key =  *)
(* "tokens" the prefix without -k (KeyPre).                               *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC, KVTree

(* The constants. Ten of them are declared in KVTree, because its operators
   depend on them (a module cannot refer to what the module extending it
   declares); a model binds them like the others:
     R              ranks (context-parallel size)
     L2             pages in the shared host pool
     Policy         "write_through" or "write_back"
     L3             pages each rank's disk holds; 0 = no L3 tier (the L1/L2 spec)
     SpillQueueCap  committed objects queued for a spill at most (more are dropped)
   and, where the reference breaks an invariant, a knob: "reference" models it,
   "fixed" the model's repair (docs/model.md, the findings):
     UnbackedEvict  "reference": an unbacked leaf with L2-only children is a device
                    victim (evicting it orphans them)
     DurableSplit   "reference": a split's lower part, and the node a spill's ack
                    marks, keep or get durable whatever the split offset
   and how a load-back evicts under write_back:
     WriteBackEvict "sync": its unbacked device victims are written back inside its
                    step; "deferred": and evicted only after its other victims, each
                    victim re-checked first, as the reference does (a raise where a
                    deferred child is still on L1: invariant Running); "deferred_fixed":
                    the same with the re-check fixed; "locked": they are no victims
   and the victim order and the injected defect:
     VictimOrder    "slru" (nodes hit twice or more are evicted last) or "lru"
     Bug            an injected defect (docs/defects.md), or "none" *)
CONSTANTS
    P,                  \* tokens per page
    L1,                 \* device pages per rank lane
    WriteThreshold,     \* hits that make a node eligible for a backup (write_through)
    LoadBackThreshold,  \* tokens a host hit must cover to be loaded back
    MaxRequests,        \* arrivals in all (0 = unbounded)
    MaxLive,            \* requests alive at once (0 = unbounded)
    Prompts,            \* request shapes [pages: Seq(Int), out_pages: Nat] that Next draws from,
                        \* each with a namespace `ns` (PromptNs) where some prompt's is not 0
    SpillInflight,      \* spills in flight at most
    ReloadInflight,     \* reloads in flight at most
    ReloadTTL,          \* ticks a request may wait for a reload before it is released
    MaxDiskFaults,      \* DiskFail steps in all (0 = unbounded, -1 = none)
    CommitEntry,        \* a rank's entry into the commit collective: "fixed" (whenever a
                        \* backup is in flight), "reference" (and not when its own ack queue
                        \* is empty: it returns early), "atomic" (the collective as one step)
    AckTiming,          \* when a rank's final write ack enters its queue: "fixed" (with its
                        \* copy's end, WriteDone), "reference" (before it, AckAppend(r); the
                        \* copy's end is then the ack's finish query), "lockstep" (before it,
                        \* on every rank at once, AckAppendAll)
    PreparedBackups,    \* TRUE: write-through backups are prepared before the forward pass (Prepare)
    OwnDiskDurable      \* "reference": SpillSubmit marks durable, without a spill, an entry whose
                        \* pages the deciding rank's own disk holds (ranks may decide otherwise);
                        \* "shared": whose every page some rank's disk holds (a shared index)

ASSUME /\ R \in Nat \ {0} /\ P \in Nat \ {0} /\ L1 \in Nat \ {0} /\ L2 \in Nat \ {0}
       /\ Policy \in {"write_through", "write_back"}
       /\ WriteThreshold \in Nat \ {0} /\ LoadBackThreshold \in Nat
       /\ MaxRequests \in Nat /\ MaxLive \in Nat
       /\ L3 \in Nat /\ SpillQueueCap \in Nat \ {0} /\ SpillInflight \in Nat \ {0}
       /\ ReloadInflight \in Nat \ {0} /\ ReloadTTL \in Nat \ {0} /\ MaxDiskFaults \in Nat \cup {-1}
       /\ CommitEntry \in {"fixed", "reference", "atomic"}
       /\ AckTiming \in {"fixed", "reference", "lockstep"}
       /\ UnbackedEvict \in {"fixed", "reference"} /\ DurableSplit \in {"fixed", "reference"}
       /\ VictimOrder \in {"slru", "lru"}
       /\ PreparedBackups \in BOOLEAN /\ CarryHostHit \in BOOLEAN
       /\ OwnDiskDurable \in {"fixed", "reference", "shared"}
       /\ Bug \in {"none", "skip_collective", "local_host_alloc", "double_free", "load_uaf",
                  "evict_pending", "split_pending", "duplicate_ack", "reload_stale_anchor",
                  "l3_no_min", "wallclock_tiebreak", "backup_host_uaf",
                  "load_host_release", "lease_expiry_free",
                  "reload_fail_double_free", "failed_store_visible", "host_hit_unpinned", "loadback_evicts_own_host",
                  "write_back_fail_evict", "host_key_no_ns", "lora_salt_collision", "l3_key_no_ns"}
       /\ WriteBackEvict \in {"locked", "sync", "deferred", "deferred_fixed"}
       \* an L3 reload reserves a run and a spill reads one (L2Alloc: KVTree)
       /\ L2Alloc = "run" \/ L3 = 0

VARIABLES
    nodes,          \* node id -> [parent, key, dev, host, durable, lock, pin, hits, touched]
    next_id,        \* the next node id
    clock,          \* the replicated logical clock; every access stamps `touched`
    next_rid,       \* the next request id
    dev_free,       \* free device pages
    l2_free,        \* free host pages
    objects,        \* L2 object key -> [base, length, committed, owner]
    pending,        \* nodes whose backup is reserved but not committed (object key = node id)
    writes,         \* submitted backup writes (node ids), in submit order
    requests,       \* request id -> [tokens, out_pages, phase, node, pages, tried, hit, hitlen, hitpin, ns]
    write_done,     \* local: rank -> writes at the head of `writes` it has finished
    dev_content,    \* ghost: device page -> the prefix whose KV it holds
    host_content,   \* ghost: host page -> the prefix whose KV it holds
    \* L3 (all at their initial values when L3 = 0)
    spill_queue,    \* committed objects (= node ids) waiting to be spilled, FIFO
    spills,         \* spills in flight, submit order: [node, hashes, pinned]
    reload_candidates, \* request id -> [anchor, tokens, hashes]: misses marked for a reload
    reloads,        \* reloads in flight: [key, anchor, tokens, hashes, waiters, ttl, base, length]
    spill_gathered, \* local: rank -> spills at the head of `spills` it has gathered
    spill_done,     \* local: rank -> the ok bit of each spill it has written, from the head
    reload_done,    \* local: rank -> the ok bit of each reload it has read, from the head
    disk_ok,        \* local: rank -> whether its disk works
    disk_faults,    \* DiskFail steps so far
    l3,             \* local: rank -> (page hash -> the prefix whose KV its disk holds there)
    spill_staged,   \* ghost: rank -> gathered, not yet written spills: Seq(<<hash, content>>) each
    loads,          \* load-backs in flight, issue order: [node, pages: Seq(<<device page, host page>>)]
    load_done,      \* local: rank -> loads at the head of `loads` whose copies it has done
    commit_round,   \* local: rank -> its place in the open round of the commit collective:
                    \* 0 not at its call yet, 1 entered, 2 returned early
    acked,          \* local: rank -> writes at the head of `writes` whose final ack it has
                    \* appended (AckTiming = "reference" or "lockstep"; 0 under "fixed")
    prepared,       \* request id -> node id of its prepared backup (NoNode: its reserve did not fit)
    diverged,       \* ghost: <<>>, or the first step some rank decided otherwise than rank 0
                    \* (only under a defect in RankViewBugs, or OwnDiskDurable = "reference"):
                    \* [action, ranks]
    halted          \* ghost: "", or the action at which the reference stops at a raise or an
                    \* assert (only under WriteBackEvict = "deferred" or EvictWriteBack = "sync":
                    \* invariant Running)

(* The variables in named groups, each the state of one part of the cluster. An
   action assigns the variables it changes and names the rest UNCHANGED, by group
   where it keeps a whole group (kvsm/tla/frame.py reads these lists: `kvsm
   validate` compares after a step only the variables its action may change). *)
treeVars    == <<nodes, next_id, clock>>                \* the radix tree, its ids and its clock
requestVars == <<next_rid, requests, prepared>>         \* the requests and their prepared backups
deviceVars  == <<dev_free, dev_content>>                \* L1: the lanes' pages
hostVars    == <<l2_free, objects, host_content>>       \* L2: the host pool and its objects
backupVars  == <<pending, writes, write_done, commit_round, acked>>  \* backups in flight, the commit collective
loadVars    == <<loads, load_done>>                     \* load-backs in flight
spillVars   == <<spills, spill_gathered, spill_done, spill_staged>>  \* spills in flight (not their queue)
reloadVars  == <<reload_candidates, reloads, reload_done>>
diskVars    == <<disk_ok, disk_faults, l3>>             \* L3: each rank's disk
l3Vars      == <<spillVars, reloadVars, diskVars>>      \* every L3 variable but the spill queue

\* every variable: the groups, the spill queue (fed by commits, drained by spills) and
\* the ghosts `diverged` and `halted`
vars == <<treeVars, requestVars, deviceVars, hostVars, backupVars, loadVars, spill_queue, l3Vars, diverged, halted>>

DevicePool == 0 .. R * L1 - 1
HostPool == 0 .. L2 - 1
Phases == {"queued", "matched", "decoding"}

-----------------------------------------------------------------------------
(* Types *)

ContentValues == Seq(Int)   \* prefixes of page symbols, <<>> when poisoned
NodeRec == [parent: Int, key: Seq(Int), dev: Seq(DevicePool), host: Int, durable: BOOLEAN,
            lock: Nat, pin: Nat, hits: Nat, touched: Nat, ns: Nat]
RequestRec == [tokens: Seq(Int), out_pages: Nat, phase: Phases, node: Nat, pages: Seq(DevicePool),
               tried: BOOLEAN, hit: Nat, hitlen: Nat, hitpin: BOOLEAN, ns: Nat]
ObjectRec == IF L2Alloc = "pages"
             THEN [base: HostPool, length: Nat \ {0}, committed: BOOLEAN, owner: Nat, pages: Seq(HostPool)]
             ELSE [base: HostPool, length: Nat \ {0}, committed: BOOLEAN, owner: Nat]
SpillRec == [node: Nat, hashes: Seq(ContentValues), pinned: BOOLEAN]
CandidateRec == [anchor: Nat, tokens: Seq(Int), hashes: Seq(ContentValues), ns: Nat]
ReloadRec == [key: ContentValues, anchor: Nat, tokens: Seq(Int), hashes: Seq(ContentValues),
              waiters: Seq(Nat), ttl: Nat, base: HostPool, length: Nat \ {0}, ns: Nat]
LoadRec == [node: Nat, pages: Seq(DevicePool \X HostPool)]

TypeOK ==
    /\ Root \in DOMAIN nodes
    /\ DOMAIN nodes \subseteq Nat
    /\ \A n \in DOMAIN nodes : nodes[n] \in NodeRec
    /\ next_id \in Nat /\ clock \in Nat /\ next_rid \in Nat
    /\ dev_free \subseteq DevicePool
    /\ l2_free \subseteq HostPool
    /\ DOMAIN objects \subseteq Nat
    /\ \A k \in DOMAIN objects : objects[k] \in ObjectRec
    /\ pending \subseteq Nat
    /\ writes \in Seq(Nat)
    /\ DOMAIN requests \subseteq Nat
    /\ \A q \in DOMAIN requests : requests[q] \in RequestRec
    /\ write_done \in [Ranks -> Nat]
    /\ dev_content \in [DevicePool -> ContentValues]
    /\ host_content \in [HostPool -> ContentValues]
    /\ spill_queue \in Seq(Nat)
    /\ \A j \in DOMAIN spills : spills[j] \in SpillRec
    /\ DOMAIN reload_candidates \subseteq Nat
    /\ \A q \in DOMAIN reload_candidates : reload_candidates[q] \in CandidateRec
    /\ \A j \in DOMAIN reloads : reloads[j] \in ReloadRec
    /\ spill_gathered \in [Ranks -> Nat]
    /\ \A r \in Ranks : spill_done[r] \in Seq(BOOLEAN) /\ reload_done[r] \in Seq(BOOLEAN)
    /\ disk_ok \in [Ranks -> BOOLEAN]
    /\ disk_faults \in Nat
    /\ \A r \in Ranks : \A h \in DOMAIN l3[r] : l3[r][h] \in ContentValues
    /\ \A r \in Ranks : spill_staged[r] \in Seq(Seq(ContentValues \X ContentValues))
    /\ \A j \in DOMAIN loads : loads[j] \in LoadRec
    /\ load_done \in [Ranks -> Nat]
    /\ commit_round \in [Ranks -> {0, 1, 2}]
    /\ acked \in [Ranks -> Nat]
    /\ DOMAIN prepared \subseteq Nat /\ \A q \in DOMAIN prepared : prepared[q] \in Int
    /\ diverged = <<>> \/ diverged \in [action: STRING, ranks: SUBSET Ranks]
    /\ halted \in STRING

-----------------------------------------------------------------------------
Init ==
    /\ nodes = (Root :> [parent |-> NoParent, key |-> <<>>, dev |-> <<>>, host |-> NoObject,
                         durable |-> FALSE, lock |-> 0, pin |-> 0, hits |-> 0, touched |-> 0, ns |-> 0])
    /\ next_id = 1
    /\ clock = 0
    /\ next_rid = 0
    /\ dev_free = DevicePool
    /\ l2_free = HostPool
    /\ objects = EmptyFn
    /\ pending = {}
    /\ writes = <<>>
    /\ requests = EmptyFn
    /\ write_done = [r \in Ranks |-> 0]
    /\ dev_content = [p \in DevicePool |-> NoContent]
    /\ host_content = [h \in HostPool |-> NoContent]
    /\ spill_queue = <<>>
    /\ spills = <<>>
    /\ reload_candidates = EmptyFn
    /\ reloads = <<>>
    /\ spill_gathered = [r \in Ranks |-> 0]
    /\ spill_done = [r \in Ranks |-> <<>>]
    /\ reload_done = [r \in Ranks |-> <<>>]
    /\ disk_ok = [r \in Ranks |-> TRUE]
    /\ disk_faults = 0
    /\ l3 = [r \in Ranks |-> EmptyFn]
    /\ spill_staged = [r \in Ranks |-> <<>>]
    /\ loads = <<>>
    /\ load_done = [r \in Ranks |-> 0]
    /\ commit_round = [r \in Ranks |-> 0]
    /\ acked = [r \in Ranks |-> 0]
    /\ prepared = EmptyFn
    /\ diverged = <<>>
    /\ halted = ""

-----------------------------------------------------------------------------
(* The whole state as one record, the `s` of KVTree's operators. An action
   that splits, evicts or allocates computes the record after it with a pure
   operator named for what it yields (Inserted, Reserved, ...), and its effect
   is an operator of that record, named for the action with `To` (MatchTo(s),
   ...), which assigns the variables the action changes from the record and
   keeps the others UNCHANGED: the record is the operator's argument, which TLC
   evaluates once (a LET in an action it evaluates at every use). *)

State == [nodes |-> nodes, next_id |-> next_id, clock |-> clock, next_rid |-> next_rid,
          dev_free |-> dev_free, l2_free |-> l2_free, objects |-> objects,
          pending |-> pending, writes |-> writes, requests |-> requests,
          write_done |-> write_done, dev_content |-> dev_content,
          host_content |-> host_content, spill_queue |-> spill_queue, spills |-> spills,
          reload_candidates |-> reload_candidates, reloads |-> reloads,
          spill_gathered |-> spill_gathered, spill_done |-> spill_done,
          reload_done |-> reload_done, disk_ok |-> disk_ok, disk_faults |-> disk_faults,
          l3 |-> l3, spill_staged |-> spill_staged, loads |-> loads, load_done |-> load_done,
          commit_round |-> commit_round, acked |-> acked, prepared |-> prepared,
          diverged |-> diverged]

(* A deciding action (its victims, its host room, its L3 claim) is decided by
   every rank from its own replica. `out` is each view's successor, NoOutcome
   where that view refuses the step; the cluster's step is rank 0's decision
   (the replicated one when no defect lets ranks decide from their own views).
   Where another rank decides otherwise (another successor, or none) the state
   records it in `diverged`, the first time (invariant Agreement). *)
Views == IF Bug \in RankViewBugs THEN Ranks ELSE {NoView}
ClusterView == IF Bug \in RankViewBugs THEN 0 ELSE NoView
NoOutcome == [refused |-> TRUE]

\* The replicated part of a state record: what every rank holds identically.
Replicated(s) == <<s.nodes, s.next_id, s.clock, s.next_rid, s.dev_free, s.l2_free, s.objects,
                   s.pending, s.writes, s.requests, s.reload_candidates, s.spill_queue,
                   s.spills, s.reloads, s.loads, s.prepared>>

Decided(name, out) ==
    LET first == out[ClusterView]
        others == IF Bug \notin RankViewBugs \/ diverged # <<>> THEN {}
                  ELSE {v \in Ranks \ {0} : out[v] = NoOutcome \/ Replicated(out[v]) # Replicated(first)}
    IN IF others = {} THEN first
       ELSE [first EXCEPT !.diverged = [action |-> name, ranks |-> others]]

-----------------------------------------------------------------------------
(* Actions. Each is its enabling condition, as named conjuncts in the order in
   which the Python transition checks them (each check there is a `Rejected`
   with its reason), followed by its effect: the variables it changes primed,
   the others UNCHANGED (by group). Effects that split, evict or allocate are
   computed by a pure operator over State (see KVTree) and taken by the
   action's To operator: TLC caches the definitions of a LET inside an
   operator, where it re-evaluates a LET written directly in an action at
   every use.

   A guard that is a disjunction (or an \E) is, for TLC, one branch of the
   step per true disjunct, each generating the same successor again. Guards
   whose disjuncts can hold together are therefore written so that TLC
   evaluates them as one value: a set that is not empty, a membership, an IF or
   an implication. *)

(* The commit collective is entered by each rank from its own state
   (CommitCall(r)); a rank that entered waits in it, so no replicated step is
   taken while a round is open: every action that is not a rank's own step, and
   not the collective's completion (Commit), starts with RoundClosed. *)
RoundClosed == \A r \in Ranks : commit_round[r] = 0

(* Requests. A request's lock covers its node and every ancestor (lock + 1 on
   each); page k of a request (counting from the root) lives in lane k mod R. *)

InPhase(rid, phase) == rid \in DOMAIN requests /\ requests[rid].phase = phase

\* A prompt's namespace: a model whose prompts all arrive in namespace 0 names none.
PromptNs(p) == IF "ns" \in DOMAIN p THEN p.ns ELSE 0

ArrivalsLeft == MaxRequests = 0 \/ next_rid < MaxRequests
LiveRoom == MaxLive = 0 \/ Cardinality(DOMAIN requests) < MaxLive

Arrive(rid, tokens, out_pages, ns) ==
    /\ RoundClosed
    /\ rid = next_rid
    /\ ArrivalsLeft
    /\ LiveRoom
    /\ out_pages \in Nat
    /\ ns \in Nat
    /\ requests' = (rid :> [tokens |-> tokens, out_pages |-> out_pages, phase |-> "queued",
                            node |-> Root, pages |-> <<>>, tried |-> FALSE,
                            hit |-> Root, hitlen |-> 0, hitpin |-> FALSE, ns |-> ns]) @@ requests
    /\ next_rid' = next_rid + 1
    /\ UNCHANGED <<treeVars, prepared, deviceVars, hostVars, backupVars, loadVars, spill_queue,
                   l3Vars, diverged, halted>>

\* A request that an in-flight reload holds (it waits for the reload's admission).
Held(rid) == \E j \in DOMAIN reloads : rid \in Range(reloads[j].waiters)

\* A queued request marked for a reload, or held by one, waits for the reload's
\* decision instead of matching (it would compute what the reload brings).
AwaitsReload(rid) == rid \in DOMAIN reload_candidates \/ Held(rid)

Matched(s, rid) ==
    LET req == s.requests[rid]
        w == WalkKey(s.nodes, MatchKey(req.tokens), req.ns)
        split == w.cut # <<>> /\ ~Unsplittable(s, w.cut[1])
        \* stamped in the reference's order: the whole nodes, the node the match ends
        \* inside (before its split), then its new upper part
        s0 == TouchPath(s, IF w.cut = <<>> THEN w.full ELSE Append(w.full, w.cut[1]))
        path == IF split THEN Append(w.full, s.next_id) ELSE w.full
        s1 == IF split THEN TouchPath(SplitNode(s0, w.cut[1], w.cut[2]), <<s.next_id>>) ELSE s0
        k == OnL1Run(s1.nodes, path)
        last == IF k = 0 THEN Root ELSE path[k]
        \* under CarryHostHit the matched nodes below the lock are its host hit
        below == SubSeq(path, k + 1, Len(path))
        carry == CarryHostHit /\ below # <<>>
        deepest == IF carry THEN below[Len(below)] ELSE Root
        pin == carry /\ Bug # "host_hit_unpinned"
        locked == LockPath(s1.nodes, last, 1)
    IN [s1 EXCEPT !.nodes = IF pin THEN [locked EXCEPT ![deepest].pin = @ + 1] ELSE locked,
                  !.requests[rid] = [req EXCEPT !.phase = "matched", !.node = last,
                                                !.hit = deepest,
                                                !.hitlen = IF carry THEN RunPages(s1.nodes, below) ELSE 0,
                                                !.hitpin = pin]]

(* The request's carried host hit is used (LoadBack) or no longer wanted (Insert,
   Abort): the pin its match took, if any, is released. *)
DroppedHit(s, rid) ==
    LET req == s.requests[rid]
    IN [s EXCEPT !.nodes = IF req.hitpin THEN [@ EXCEPT ![req.hit].pin = @ - 1] ELSE @,
                 !.requests[rid] = [req EXCEPT !.hit = Root, !.hitlen = 0, !.hitpin = FALSE]]

\* Match's effect: a split, the stamps, the lock and the request.
MatchTo(s) ==
    /\ nodes' = s.nodes
    /\ next_id' = s.next_id
    /\ clock' = s.clock
    /\ objects' = s.objects
    /\ requests' = s.requests
    /\ spill_queue' = s.spill_queue
    /\ UNCHANGED <<next_rid, prepared, deviceVars, l2_free, host_content, backupVars, loadVars,
                   l3Vars, diverged, halted>>

(* Match the longest cached prefix (L1 or L2) of the request's key but its last
   page (MatchKey), splitting the node the match ends inside (not when it is
   unsplittable: the match then stops above it); touch the matched nodes root
   to leaf, the node it ends inside and its upper part; lock the path down to
   the deepest matched node on L1. Under CarryHostHit it records the matched
   nodes below the lock, its host hit (the deepest one and their pages), and
   pins the deepest (under host_hit_unpinned it does not pin it). *)
Match(rid) ==
    /\ RoundClosed
    /\ InPhase(rid, "queued")
    /\ ~AwaitsReload(rid)
    /\ MatchTo(Matched(State, rid))

\* Take write n out of `writes` (a rank that finished it counts one less) and free
\* its object: a rollback, of a pending or of a prepared backup.
DropWrite(s, n) ==
    LET j == IndexOf(s.writes, n)
        freed == FreeObject(s, n)
    IN [freed EXCEPT !.writes = SubSeq(@, 1, j - 1) \o SubSeq(@, j + 1, Len(@)),
                     !.write_done = [r \in Ranks |-> IF s.write_done[r] >= j
                                                       THEN s.write_done[r] - 1
                                                       ELSE s.write_done[r]],
                     \* its ack, where a rank appended it, is scrubbed (under "fixed" none is)
                     !.acked = [r \in Ranks |-> IF s.acked[r] >= j THEN s.acked[r] - 1 ELSE s.acked[r]]]

(* Request rid's prepared backup once its insert made node `new` (NoNode: no new
   node, or an abort): attached if `new` took its id (the reference's
   _attach_prepared_cp_backup: the backup becomes pending), else rolled back
   (_rollback_prepared_cp_backup). Under double_free the rollback frees the
   object's pages but keeps its registration: the write leaves `writes`, the
   object stays, naming pages that are free. *)
Settled(s, rid, new) ==
    IF rid \notin DOMAIN s.prepared THEN s
    ELSE LET p == s.prepared[rid]
             s0 == [s EXCEPT !.prepared = Remove(@, {rid})]
         IN IF p = NoNode THEN s0
            ELSE IF p = new THEN [s0 EXCEPT !.pending = @ \cup {p}]
            ELSE IF Bug = "double_free"
            THEN LET d == DropWrite(s0, p)
                 IN [d EXCEPT !.objects = (p :> s0.objects[p]) @@ @]
            ELSE DropWrite(s0, p)

(* Where Insert puts a request's pages, before it takes them: the key's path
   (after the split it needs), the pages it caches (`fresh`), the absolute
   positions of the pages to allocate (re-owned nodes, the new node, the
   request's out_pages) and the room made for them by evicting device victims
   off the path. *)
InsertLayout(s, rid, v) ==
    LET req == s.requests[rid]
        kp == KeyPath(s, req.tokens, req.ns)
        path == kp.path
        fresh == IF kp.stop THEN <<>> ELSE SubSeq(req.tokens, kp.covered + 1, Len(req.tokens))
        sizes == [k \in DOMAIN path |-> Len(kp.s.nodes[path[k]].key)]
        reown == [k \in DOMAIN path |-> IF kp.s.nodes[path[k]].dev = <<>>
                                         THEN Positions(SumSeq(SubSeq(sizes, 1, k - 1)), sizes[k])
                                         ELSE <<>>]
        positions == Flatten(reown) \o Positions(SumSeq(sizes), Len(fresh))
                     \o Positions(Len(req.tokens), req.out_pages)
        lanes == TLCEval([i \in DOMAIN positions |-> Lane(positions[i])])
    IN [path |-> path, fresh |-> fresh, sizes |-> sizes, reown |-> reown,
        positions |-> positions, lanes |-> lanes, view |-> v,
        room |-> MakeRoom(kp.s, LaneNeed(lanes), Range(path), v)]

\* Every lane gets the pages Insert takes from it, once device victims are evicted.
InsertFits(lay) == lay.room.ok

\* Device pages a load-back in flight still copies on some rank.
LoadingPages == UNION {{loads[j].pages[k][1] : k \in 1 .. Len(loads[j].pages)} : j \in DOMAIN loads}

\* The request matched a node whose load-back is in flight: its forward pass reads
\* those pages, so it waits for their copies.
ReadsLoading(rid) == \E n \in PathToRoot(nodes, requests[rid].node) : Range(nodes[n].dev) \cap LoadingPages # {}

(* WriteThroughParent (kvsm's `write_through_parent`, a definition a model
   overrides): "backed" backs a node up only when its parent is the root or is
   backed, committed or its write submitted (SGLang's write_backup); "any" does not look. *)
WriteThroughParent == "any"
ASSUME WriteThroughParent \in {"any", "backed"}

(* BackupTrigger (kvsm's `backup_trigger`, a definition a model overrides): "any"
   backs a node up in a step of its own (Reserve) once it is eligible; "insert"
   only where the reference does (_inc_hit_count): inside Insert, for each node
   it hits, top down, then for its new node unless a prepared backup is attached.
   Nothing changes under write_back (no hit count; a Reserve is a write-back). *)
BackupTrigger == "any"
ASSUME BackupTrigger \in {"any", "insert"}
InsertBacksUp == BackupTrigger = "insert" /\ WriteThrough

\* Node n of record s is eligible for a backup (IsBackupCandidate, ParentAllows).
BackupCandidateIn(s, n) ==
    LET nd == s.nodes[n]
    IN /\ nd.dev # <<>> /\ nd.host = NoObject /\ n \notin s.pending /\ nd.hits >= WriteThreshold
       /\ \/ WriteThroughParent = "any" \/ nd.parent = Root
          \/ s.nodes[nd.parent].host # NoObject \/ nd.parent \in s.pending

\* Rank v's reserve of node n's backup inside a step, as Reserve's: the host victims
\* of `s` released until a run fits (HostRoomAs), then the object, if it fits.
ReservedIn(s, n, v) ==
    LET len == Len(s.nodes[n].key)
        s1 == HostRoomAs(s, s, RoomNeed(len, v), v).s
        got == HostAlloc(s1.l2_free, len)
    IN IF ~HasRoom(s1.l2_free, len) THEN s1
       ELSE [s1 EXCEPT !.l2_free = @ \ Range(got),
                  !.objects = (n :> NewObject(got, FALSE, n)) @@ @,
                  !.pending = @ \cup {n},
                  !.writes = Append(@, n),
                  !.nodes[n].lock = @ + 1]

\* The backups of the nodes ns[k..] taken in order, each if eligible when its turn comes.
RECURSIVE BackupsFrom(_, _, _, _)
BackupsFrom(s, ns, k, v) ==
    IF k > Len(ns) THEN s
    ELSE BackupsFrom(IF BackupCandidateIn(s, ns[k]) THEN ReservedIn(s, ns[k], v) ELSE s, ns, k + 1, v)

\* The insert of request rid along its layout `lay` (InsertLayout).
Inserted(s, rid, lay) ==
    LET req == s.requests[rid]
        path == lay.path
        fresh == lay.fresh
        sizes == lay.sizes
        reown == lay.reown
        offset == [k \in DOMAIN path |-> SumSeq([j \in 1 .. k - 1 |-> Len(reown[j])])]
        nReown == SumSeq([k \in DOMAIN path |-> Len(reown[k])])
        s1 == lay.room.s
        got == Alloc(s1.dev_free, lay.lanes)
        pages == got.pages
        filled == 1 .. nReown + Len(fresh)
        last == IF path = <<>> THEN Root ELSE path[Len(path)]
        \* a prepared backup of the new node's length is attached: the node takes the
        \* id taken for it in advance, is locked by it and counts no hit
        prep == IF rid \in DOMAIN s.prepared THEN s.prepared[rid] ELSE NoNode
        attach == prep # NoNode /\ fresh # <<>> /\ Len(fresh) = s.objects[prep].length
        newId == IF attach THEN prep ELSE s1.next_id
        newNode == [parent |-> last, key |-> fresh,
                    dev |-> SubSeq(pages, nReown + 1, nReown + Len(fresh)),
                    host |-> NoObject, durable |-> FALSE, lock |-> Bit(attach), pin |-> 0,
                    hits |-> IF WriteThrough /\ ~attach THEN 1 ELSE 0,
                    touched |-> s1.clock + Len(path) + 1, ns |-> req.ns]
        \* path nodes: re-owned ones get their pages; all are touched root to leaf;
        \* under write_through those already on L1 count a hit
        pathNodes == [n \in DOMAIN s1.nodes |->
                        IF n \in Range(path)
                        THEN LET k == IndexOf(path, n)
                             IN [s1.nodes[n] EXCEPT
                                   !.dev = IF reown[k] = <<>> THEN @
                                           ELSE SubSeq(pages, offset[k] + 1, offset[k] + sizes[k]),
                                   !.touched = s1.clock + k,
                                   !.hits = @ + Bit(WriteThrough /\ reown[k] = <<>>)]
                        ELSE s1.nodes[n]]
        grown == IF fresh = <<>> THEN pathNodes ELSE (newId :> newNode) @@ pathNodes
        final == IF fresh = <<>> THEN last ELSE newId
        \* InsertBacksUp: the nodes it hit, top down, then the new one unless attached
        hit == SelectSeq([k \in DOMAIN path |-> IF reown[k] = <<>> THEN path[k] ELSE Root], LAMBDA x : x # Root)
        backs == hit \o (IF fresh = <<>> \/ attach THEN <<>> ELSE <<newId>>)
        done == DroppedHit([s1 EXCEPT
          !.nodes = LockPath(LockPath(grown, final, 1), req.node, -1),
          !.next_id = IF fresh = <<>> \/ attach THEN @ ELSE @ + 1,
          !.clock = @ + Len(path) + Bit(fresh # <<>>),
          !.dev_free = got.free,
          !.dev_content = Zip(SubSeq(pages, 1, nReown + Len(fresh)),
                              [i \in filled |-> NsPre(req.ns) \o SubSeq(req.tokens, 1, lay.positions[i] + 1)]) @@ @,
          !.requests[rid] = [req EXCEPT !.phase = "decoding", !.node = final,
                                        !.pages = SubSeq(pages, nReown + Len(fresh) + 1, Len(pages))]], rid)
    IN Settled(IF InsertBacksUp THEN BackupsFrom(done, backs, 1, lay.view) ELSE done,
               rid, IF attach THEN prep ELSE NoNode)

\* Insert's effect: the split, the evictions, the pages taken, the request, its prepared backup settled.
InsertTo(s) ==
    /\ nodes' = s.nodes
    /\ next_id' = s.next_id
    /\ clock' = s.clock
    /\ dev_free' = s.dev_free
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ pending' = s.pending
    /\ writes' = s.writes
    /\ requests' = s.requests
    /\ write_done' = s.write_done
    /\ acked' = s.acked
    /\ dev_content' = s.dev_content
    /\ host_content' = s.host_content
    /\ spill_queue' = s.spill_queue
    /\ prepared' = s.prepared
    /\ diverged' = s.diverged
    /\ UNCHANGED <<halted, next_rid, commit_round, loadVars, l3Vars>>

(* Insert with the cluster's layout `lay`: the layout (the key's walk and the room
   it needs) is the costly part, so it is an argument, which TLC evaluates once
   (it evaluates a LET of an action at every use); each other rank's view under
   a defect has its own. *)
InsertAlong(rid, lay) ==
    /\ InsertFits(lay)
    /\ InsertTo(Decided("Insert", [v \in Views |-> LET l == IF v = ClusterView THEN lay ELSE InsertLayout(State, rid, v)
                                                   IN IF InsertFits(l) THEN Inserted(State, rid, l) ELSE NoOutcome]))

(* After the forward pass, cache the request's pages: whole nodes on L1 are hits,
   whole nodes only on L2 get device pages back (their content recomputed), the
   node the key diverges inside is split (at an unsplittable one caching stops
   above it) and the rest becomes one new node. Room comes from evicting device
   victims in victim order; the request also takes its out_pages. Its lock
   moves to the deepest node of its key. *)
Insert(rid) ==
    /\ RoundClosed
    /\ InPhase(rid, "matched")
    /\ ~ReadsLoading(rid)
    /\ InsertAlong(rid, InsertLayout(State, rid, ClusterView))

\* Release whatever the request holds: its lock (once matched), its pages, its
\* reload mark, its place among a reload's waiters, and its prepared backup.
Released(s, rid) ==
    LET req == s.requests[rid]
        freed == FreeDev(Settled(DroppedHit(s, rid), rid, NoNode), req.pages)
    IN [freed EXCEPT !.nodes = IF req.phase # "queued" THEN LockPath(@, req.node, -1) ELSE @,
                     !.requests = Remove(@, {rid}),
                     !.reload_candidates = Remove(@, {rid}),
                     !.reloads = [j \in DOMAIN s.reloads |->
                                    [s.reloads[j] EXCEPT !.waiters = Without(@, rid)]]]

\* Finish's and Abort's effect: what the request held released.
ReleaseTo(s) ==
    /\ nodes' = s.nodes
    /\ dev_free' = s.dev_free
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ writes' = s.writes
    /\ requests' = s.requests
    /\ write_done' = s.write_done
    /\ acked' = s.acked
    /\ dev_content' = s.dev_content
    /\ host_content' = s.host_content
    /\ reload_candidates' = s.reload_candidates
    /\ reloads' = s.reloads
    /\ prepared' = s.prepared
    /\ UNCHANGED <<next_id, clock, next_rid, pending, commit_round, loadVars, spill_queue,
                   spillVars, reload_done, diskVars, diverged, halted>>

Finish(rid) ==
    /\ RoundClosed
    /\ InPhase(rid, "decoding")
    /\ ReleaseTo(Released(State, rid))

\* A request may be aborted in any phase.
Abort(rid) ==
    /\ RoundClosed
    /\ rid \in DOMAIN requests
    /\ ReleaseTo(Released(State, rid))

-----------------------------------------------------------------------------
(* Split is demand-driven: a queued request's match key, or a matched request's
   whole key, diverges inside the node after `at` pages (what its Match, or
   Insert, would split), and the node's backup is not pending. It stamps nothing
   (clock unchanged): a departure, since the reference splits only inside a walk
   that stamps the nodes it visits (docs/model.md, the mechanism table). *)
LiveKeyCuts == {WalkKey(nodes, MatchKey(requests[rid].tokens), requests[rid].ns).cut :
                   rid \in {q \in DOMAIN requests : requests[q].phase = "queued"}}
               \cup {WalkKey(nodes, requests[rid].tokens, requests[rid].ns).cut :
                   rid \in {q \in DOMAIN requests : requests[q].phase = "matched"}}

IsDemandedSplit(n, at) ==
    /\ ~Unsplittable(State, n)
    /\ <<n, at>> \in LiveKeyCuts

\* Split's effect: the two parts, and the upper object when the node is backed.
SplitTo(s) ==
    /\ nodes' = s.nodes
    /\ next_id' = s.next_id
    /\ objects' = s.objects
    /\ spill_queue' = s.spill_queue
    /\ UNCHANGED <<clock, requestVars, deviceVars, l2_free, host_content, backupVars, loadVars,
                   l3Vars, diverged, halted>>

Split(n, at) ==
    /\ RoundClosed
    /\ n \in DOMAIN nodes
    /\ IsDemandedSplit(n, at)
    /\ SplitTo(SplitNode(State, n, at))

-----------------------------------------------------------------------------
(* The stale-tail prune (docs/model.md, PruneStaleTail). The reference floors a
   split that falls inside a page to the page boundary and deletes the lower part
   with its whole subtree, device pages and objects; it refuses when a node of the
   subtree is locked, pinned by a spill or has a pending backup. Keys here are page
   symbols, so a cut inside a page is a cut Split could take too: PruneStaleTail is
   the other shape of the same cut. StalePrune is a definition a model overrides
   (`StalePrune = "reference"` in its cfg), so that a model written before it need
   not bind it:
     "off"        no prune (every cut splits at a page boundary)
     "reference"  the reference's guard
     "fixed"      also leaves alone a subtree that in-flight L3 work refers to: a
                  queued or in-flight spill of one of its nodes, a reload candidate
                  or reload anchored in it *)
StalePrune == "off"
ASSUME StalePrune \in {"off", "reference", "fixed"}

PruneBlocked(sub) ==
    \/ \E m \in sub : nodes[m].lock > 0 \/ nodes[m].pin > 0 \/ m \in pending
    \/ /\ StalePrune = "fixed"
       /\ \/ Range(spill_queue) \cap sub # {}
          \/ \E j \in DOMAIN spills : spills[j].node \in sub
          \/ \E rid \in DOMAIN reload_candidates : reload_candidates[rid].anchor \in sub
          \/ \E j \in DOMAIN reloads : reloads[j].anchor \in sub

\* PruneStaleTail's effect: the upper part stays, the lower part and its subtree go.
PruneTo(s) ==
    /\ nodes' = s.nodes
    /\ next_id' = s.next_id
    /\ dev_free' = s.dev_free
    /\ dev_content' = s.dev_content
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ host_content' = s.host_content
    /\ spill_queue' = s.spill_queue
    /\ UNCHANGED <<clock, requestVars, backupVars, loadVars, l3Vars, diverged, halted>>

PruneStaleTail(n, at) ==
    /\ StalePrune # "off"
    /\ RoundClosed
    /\ n \in DOMAIN nodes
    /\ <<n, at>> \in LiveKeyCuts
    /\ ~PruneBlocked(Subtree(nodes, n))
    /\ PruneTo(PruneSubtree(SplitNode(State, n, at), n))

-----------------------------------------------------------------------------
(* Backups: reserve an object (first fit, evicting host victims to fit), write
   it on every rank, commit what every rank finished, or roll it back. `fits` is
   the reserve's outcome, which the state decides: when the snapshot of host
   victims runs out first, the backup is skipped and the evictions made stay
   (the reference's evict-to-fit); a failed reserve with no victim is no step. *)

(* Eligible for a backup: on L1, unbacked, not pending, and under write_through
   hit often enough; under write_back an unlocked leaf of L1 (it is written back
   before it is evicted). *)
ParentAllows(n) ==
    \/ WriteThroughParent = "any"
    \/ nodes[n].parent = Root
    \/ nodes[nodes[n].parent].host # NoObject
    \/ nodes[n].parent \in pending

IsBackupCandidate(n) ==
    LET nd == nodes[n]
    IN /\ n # Root
       /\ nd.dev # <<>>
       /\ nd.host = NoObject
       /\ n \notin pending
       /\ IF WriteThrough THEN nd.hits >= WriteThreshold /\ ParentAllows(n)
          ELSE nd.lock = 0 /\ ~ChildOnL1(nodes, n)

\* The state after rank v makes room for a backup of `len` pages (HostRoom, in its
\* victim order, for the run it looks for).
ReserveRoom(s, len, v) == HostRoomAs(s, s, RoomNeed(len, v), v).s

\* A free run of `len` host pages, once host victims are released (HostRoom): the
\* shortcut HostRoomFits, unless rank v looks for another run than the object's.
HostRoomFor(len, v) ==
    IF RoomNeed(len, v) = len THEN HostRoomFits(State, len)
    ELSE HasRoom(ReserveRoom(State, len, v).l2_free, len)

Reserved(s, n, fits, v) ==
    LET len == Len(s.nodes[n].key)
        s1 == ReserveRoom(s, len, v)
        got == HostAlloc(s1.l2_free, len)
    IN IF ~fits THEN s1
       ELSE [s1 EXCEPT !.l2_free = @ \ Range(got),
                  !.objects = (n :> NewObject(got, FALSE, n)) @@ @,
                  !.pending = @ \cup {n},
                  !.writes = Append(@, n),
                  !.nodes[n].lock = @ + 1]

\* Reserve's effect: the host victims released and the object reserved.
ReserveTo(s) ==
    /\ nodes' = s.nodes
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ pending' = s.pending
    /\ writes' = s.writes
    /\ host_content' = s.host_content
    /\ diverged' = s.diverged
    /\ UNCHANGED <<halted, next_id, clock, requestVars, deviceVars, write_done, commit_round, acked, loadVars,
                   spill_queue, l3Vars>>

Reserve(n, fits) ==
    /\ RoundClosed
    /\ ~InsertBacksUp
    /\ n \in DOMAIN nodes
    /\ IsBackupCandidate(n)
    /\ fits = HostRoomFor(Len(nodes[n].key), ClusterView)
    /\ ~fits => HostVictims(State) # {}
    /\ ReserveTo(Decided("Reserve", [v \in Views |-> IF HostRoomFor(Len(nodes[n].key), v) = fits
                                                    THEN Reserved(State, n, fits, v) ELSE NoOutcome]))

(* Prepared write-through backups (PreparedBackups, the reference's production
   path, prepare_write_backups_for_reqs): before a matched request's forward
   pass, once, the pages its insert will add get a node id taken in advance and
   an L2 object (evicting host victims to fit, as Reserve does: a deciding
   action, each rank making room in its own victim order for the run it looks
   for), and their write joins `writes`; when it cannot fit, the id is spent,
   the evictions stay and the request is marked (NoNode). *)

\* The pages request rid's insert would add as a new node: its key beyond what the
\* tree holds, the node it diverges inside included (the reference's probe).
PrepareLen(s, rid) ==
    LET req == s.requests[rid]
        w == WalkKey(s.nodes, req.tokens, req.ns)
    IN Len(req.tokens) - w.covered - (IF w.cut = <<>> THEN 0 ELSE w.cut[2])

Prepared(s, rid, fits, v) ==
    LET len == PrepareLen(s, rid)
        u == s.next_id
        s1 == [ReserveRoom(s, len, v) EXCEPT !.next_id = u + 1]
        got == HostAlloc(s1.l2_free, len)
    IN IF ~fits THEN [s1 EXCEPT !.prepared = (rid :> NoNode) @@ @]
       ELSE [s1 EXCEPT !.l2_free = @ \ Range(got),
                       !.objects = (u :> NewObject(got, FALSE, u)) @@ @,
                       !.prepared = (rid :> u) @@ @,
                       !.writes = Append(@, u)]

\* Prepare's effect: the host victims released, the id taken and the object reserved.
PrepareTo(s) ==
    /\ nodes' = s.nodes
    /\ next_id' = s.next_id
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ writes' = s.writes
    /\ host_content' = s.host_content
    /\ prepared' = s.prepared
    /\ diverged' = s.diverged
    /\ UNCHANGED <<halted, clock, next_rid, requests, deviceVars, pending, write_done, commit_round,
                   acked, loadVars, spill_queue, l3Vars>>

Prepare(rid, fits) ==
    /\ RoundClosed
    /\ PreparedBackups /\ WriteThrough
    /\ InPhase(rid, "matched")
    /\ rid \notin DOMAIN prepared
    /\ PrepareLen(State, rid) > 0
    /\ fits = HostRoomFor(PrepareLen(State, rid), ClusterView)
    /\ PrepareTo(Decided("Prepare", [v \in Views |-> IF HostRoomFor(PrepareLen(State, rid), v) = fits
                                                    THEN Prepared(State, rid, fits, v) ELSE NoOutcome]))

(* The rank steps, WriteDone and Commit, compute their effect in the action,
   without a state record: they are what the fairness of the liveness property
   ranges over, and TLC evaluates them once per edge and per property branch. *)

\* Host content once rank r has copied the pages of write n that sit in its lane.
Stored(r, n) ==
    LET dev == nodes[n].dev
        mine == {i \in DOMAIN dev : Lane(dev[i]) = r}
    IN [h \in {ObjPage(objects[n], i) : i \in mine} |->
          dev_content[dev[CHOOSE i \in mine : ObjPage(objects[n], i) = h]]] @@ host_content

\* Rank r has a submitted write it has not finished, and it is attached: the write
\* of a prepared backup waits for its insert (the reference defers its ack). Under
\* AckTiming # "fixed" the finish query is asked of an appended ack only.
WriteLeft(r) == /\ write_done[r] < (IF AckTiming # "fixed" THEN acked[r] ELSE Len(writes))
                /\ writes[write_done[r] + 1] \in pending

(* Rank r finishes its next write: it copies the pages in its lane into the object.
   Not while it waits in the commit collective: its count went in when it entered.
   Under duplicate_ack the rank's ack of the write completes twice: the second
   completion is counted against the next write in the queue, whose pages the
   rank has not copied. *)
WriteDone(r) ==
    /\ r \in Ranks
    /\ WriteLeft(r)
    /\ commit_round[r] # 1
    /\ host_content' = Stored(r, writes[write_done[r] + 1])
    /\ write_done' = [write_done EXCEPT ![r] = @ + (IF Bug = "duplicate_ack" /\ @ + 1 < Len(writes) THEN 2 ELSE 1)]
       \* a duplicate is an ack whose finish query already answers true: it stands for
       \* the next write's ack
    /\ acked' = IF AckTiming # "fixed" THEN [acked EXCEPT ![r] = Max2(@, write_done'[r])] ELSE acked
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, l2_free, objects, pending, writes,
                   commit_round, loadVars, spill_queue, l3Vars, diverged, halted>>

(* Rank r appends the final ack of its next write to its ack queue, before the
   copy finishes (AckTiming = "reference": at a layer-end / post-forward point of
   its own), in submit order; a prepared backup's too, before its insert attaches
   it. Also while it waits in the commit collective (the forward pass appends it,
   not the scheduler that waits): the count it entered with is unchanged. *)
AckAppend(r) ==
    /\ AckTiming = "reference"
    /\ r \in Ranks
    /\ acked[r] < Len(writes)
    /\ acked' = [acked EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, pending, writes, write_done,
                   commit_round, loadVars, spill_queue, l3Vars, diverged, halted>>

(* Every rank appends the final ack of its next write, before the copy finishes,
   at the same point of its program (AckTiming = "lockstep": the reading under
   which the reference's comment, a deterministic layer-end / post-forward point
   across CP ranks, holds): one step for all ranks, never while a round of the
   commit collective is open (between two ranks' calls of one round). A rank that
   has appended every write's ack (a duplicate ack under duplicate_ack) appends
   nothing. *)
AckAppendAll ==
    /\ AckTiming = "lockstep"
    /\ RoundClosed
    /\ \E r \in Ranks : acked[r] < Len(writes)
    /\ acked' = [r \in Ranks |-> IF acked[r] < Len(writes) THEN acked[r] + 1 ELSE acked[r]]
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, pending, writes, write_done,
                   commit_round, loadVars, spill_queue, l3Vars, diverged, halted>>

\* Every rank has finished the write at the head of `writes`.
WrittenEverywhere == \A r \in Ranks : write_done[r] > 0

\* The first m writes, `done`, become visible on every rank; their objects are
\* queued for a spill, in write order.
CommitFirst(m, done) ==
    /\ pending' = pending \ done
    /\ objects' = [k \in DOMAIN objects |->
                     IF k \in done THEN [objects[k] EXCEPT !.committed = TRUE] ELSE objects[k]]
    /\ nodes' = [n \in DOMAIN nodes |->
                   IF n \in done THEN [nodes[n] EXCEPT !.host = n, !.lock = @ - 1] ELSE nodes[n]]
    /\ writes' = SubSeq(writes, m + 1, Len(writes))
    /\ write_done' = [r \in Ranks |-> write_done[r] - m]
       \* the committed acks leave every rank's queue (each appended them: m <= acked)
    /\ acked' = IF AckTiming # "fixed" THEN [r \in Ranks |-> acked[r] - m] ELSE acked
    /\ spill_queue' = Enqueue(spill_queue, SubSeq(writes, 1, m))
    /\ commit_round' = [r \in Ranks |-> 0]
    /\ UNCHANGED <<next_id, clock, requestVars, deviceVars, l2_free, host_content, loadVars, l3Vars,
                   diverged, halted>>

\* Rank r reaches the commit collective's call (the reference's writing_check MIN
\* all-reduce) while a backup is in flight. It enters, or under "reference", when
\* its own ack queue is empty (AckQueue(r) = 0), returns early. Under skip_collective
\* a rank with nothing finished (write_done[r] = 0) skips the MIN under "fixed" too.
\* When every rank has returned early there was no collective and the round is over.
\* The acks in rank r's queue: under AckTiming = "fixed" a rank's final ack of a
\* backup enters its queue with its copy (write_done[r]); under "reference" the acks
\* it appended, finished or not.
AckQueue(r) == IF AckTiming # "fixed" THEN acked[r] ELSE write_done[r]

CommitCall(r) ==
    /\ CommitEntry # "atomic"
    /\ r \in Ranks
    /\ commit_round[r] = 0
       \* a backup in flight: under AckTiming = "reference" the reference's
       \* ongoing_write_through (pending; a prepared backup joins it at its insert)
    /\ IF AckTiming # "fixed" THEN pending # {} ELSE writes # <<>>
    /\ LET c1 == [commit_round EXCEPT ![r] =
                     IF /\ CommitEntry = "fixed" \/ AckQueue(r) > 0
                        /\ Bug # "skip_collective" \/ write_done[r] > 0
                     THEN 1 ELSE 2]
       IN commit_round' = IF \A q \in Ranks : c1[q] = 2 THEN [q \in Ranks |-> 0] ELSE c1
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, pending, writes, write_done,
                   acked, loadVars, spill_queue, l3Vars, diverged, halted>>

\* The agreement: the commit collective completes once every rank entered it
\* (under "atomic" it is this one step, when the MIN is not 0), and the first MIN
\* over ranks of the writes each finished are committed (none when it is 0).
Commit ==
    /\ IF CommitEntry = "atomic" THEN WrittenEverywhere ELSE \A r \in Ranks : commit_round[r] = 1
    /\ CommitFirst(Min({write_done[r] : r \in Ranks}),
                   Range(SubSeq(writes, 1, Min({write_done[r] : r \in Ranks}))))

(* Abandon a pending backup wherever it is in `writes`. Under double_free the
   rollback frees the object's pages but does not release its registration: the
   backup stays pending with its write and its object, which the next rollback
   (or anything else that frees it) frees a second time. *)
RolledBack(s, n) ==
    IF Bug = "double_free"
    THEN LET gone == ObjectPages(s.objects[n])
         IN [s EXCEPT !.l2_free = @ \cup gone, !.host_content = [h \in gone |-> NoContent] @@ @]
    ELSE [DropWrite(s, n) EXCEPT !.pending = @ \ {n}, !.nodes[n].lock = @ - 1]

\* Rollback's effect: the write and its object dropped.
RollbackTo(s) ==
    /\ nodes' = s.nodes
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ pending' = s.pending
    /\ writes' = s.writes
    /\ write_done' = s.write_done
    /\ acked' = s.acked
    /\ host_content' = s.host_content
    /\ UNCHANGED <<next_id, clock, requestVars, deviceVars, commit_round, loadVars, spill_queue,
                   l3Vars, diverged, halted>>

Rollback(n) ==
    /\ RoundClosed
    /\ n \in pending
    /\ RollbackTo(RolledBack(State, n))

-----------------------------------------------------------------------------
(* Eviction: the victim is the first of its tier's order; the argument names it
   so that a log reads plainly, and the guard checks that the order picks it. *)

IsHostVictim(n, v) ==
    /\ HostEvictable(State, n)
    /\ n = FirstVictimAs(nodes, HostVictims(State), v)

\* EvictHost's effect: the node and its object gone.
EvictHostTo(s) ==
    /\ nodes' = s.nodes
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ host_content' = s.host_content
    /\ diverged' = s.diverged
    /\ UNCHANGED <<halted, next_id, clock, requestVars, deviceVars, backupVars, loadVars, spill_queue,
                   l3Vars>>

EvictHost(n) ==
    /\ RoundClosed
    /\ n \in DOMAIN nodes
    /\ IsHostVictim(n, ClusterView)
    /\ EvictHostTo(Decided("EvictHost", [v \in Views |-> IF IsHostVictim(n, v) THEN EvictHostNode(State, n)
                                                        ELSE NoOutcome]))

\* The pages of the L2-only nodes below request rid's lock, along its key (under
\* CarryHostHit, those of its recorded hit still off L1).
HostHit(rid) == RunPages(nodes, LoadRun(nodes, requests[rid]))

(* The reference's synchronous write-back of an unbacked device victim n inside a
   load-back's eviction (write_backup(write_back=True), then writing_check, which
   blocks until the copy is done), once a run of its length is free: the object,
   every rank's copy of its pages (the host pages take the device pages' content),
   the commit (queued for a spill). *)
WrittenBack(s, n) ==
    LET len == Len(s.nodes[n].key)
        got == HostAlloc(s.l2_free, len)
    IN [s EXCEPT !.l2_free = @ \ Range(got),
                 !.objects = (n :> NewObject(got, TRUE, n)) @@ @,
                 !.host_content = [h \in Range(got) |-> s.dev_content[s.nodes[n].dev[IndexOf(got, h)]]] @@ @,
                 !.nodes[n].host = n,
                 !.spill_queue = Enqueue(@, <<n>>)]

(* Evict the victims in order under SyncWriteBack (after[k]: once the first k are
   evicted): an unbacked one is written back first, its host room made from a
   snapshot of the host victims as they stand then but `keep` (rank v's order,
   as Reserve's); `ok` is FALSE when a write-back finds no room (the load-back
   is refused; under write_back_fail_evict the victim is evicted all the same). *)
EvictAllSync(s, victims, keep, v) ==
    LET after[k \in Nat] ==
            IF k = 0 THEN [s |-> s, ok |-> TRUE]
            ELSE LET r == after[k - 1]
                     n == victims[k]
                 IN IF ~r.ok THEN r
                    ELSE IF r.s.nodes[n].host # NoObject THEN [r EXCEPT !.s = EvictDeviceNode(@, n)]
                    ELSE LET len == Len(r.s.nodes[n].key)
                             hv == HostVictims(r.s) \ keep
                             room0 == HostRoom(r.s, RoomNeed(len, v), TLCEval(VictimKeys(r.s.nodes, hv, v)), hv)
                             room == IF Bug = "backup_host_uaf" /\ ~room0.ok THEN InflightRoom(room0.s, RoomNeed(len, v)) ELSE room0
                         IN IF HasRoom(room.s.l2_free, len) THEN [s |-> EvictDeviceNode(WrittenBack(room.s, n), n), ok |-> TRUE]
                            \* under write_back_fail_evict the victim is evicted as though it were backed
                            ELSE IF Bug = "write_back_fail_evict"
                            THEN [r EXCEPT !.s = [FreeDev(room.s, room.s.nodes[n].dev) EXCEPT !.nodes[n].dev = <<>>]]
                            ELSE [r EXCEPT !.ok = FALSE]
    IN after[Len(victims)]

(* EvictWriteBack (under write_back): "locked", an unbacked device leaf is no
   victim of EvictDevice (its write-back is its own Reserve); "sync", the
   reference's evict(): it is one, written back inside the step (as a load-back's
   victims are, EvictAllSync) and evicted as backed, and where no host run fits the
   reference's assert that it is backed fires: the step records it in `halted`
   (invariant Running); "sync_fixed": one whose write-back finds no run is skipped. *)
EvictWriteBack == "locked"
ASSUME EvictWriteBack \in {"locked", "sync", "sync_fixed"}
EvictWritesBack == Policy = "write_back" /\ EvictWriteBack # "locked"

\* Device victim n evicted in rank v's view, written back first if unbacked: [s, ok].
EvictedAs(s, n, v) == EvictAllSync(s, <<n>>, {}, v)

\* EvictDevice's victims (rank v's view): under EvictWritesBack the unbacked leaves
\* too, but under "sync_fixed" one whose write-back finds no room.
EvictVictims(s, v) ==
    DevVictims(s) \cup {n \in UnbackedLeaves(s) : EvictWriteBack = "sync" \/ EvictedAs(s, n, v).ok}

\* (in rank v's victim order)
IsDeviceVictim(n, v) ==
    IF ~EvictWritesBack THEN DevEvictable(State, n) /\ n = FirstVictimAs(nodes, DevVictims(State), v)
    ELSE LET vs == EvictVictims(State, v) IN n \in vs /\ n = FirstVictimAs(nodes, vs, v)

(* Rank v's outcome of EvictDevice(n): the node off L1 (written back first under
   EvictWritesBack); where its write-back finds no room, the state as it was (the
   reference stops at its assert). *)
EvictDeviceAs(n, v) ==
    IF ~IsDeviceVictim(n, v) THEN NoOutcome
    ELSE IF ~EvictWritesBack THEN EvictDeviceNode(State, n)
    ELSE LET e == EvictedAs(State, n, v) IN IF e.ok THEN e.s ELSE State

\* EvictDevice(n)'s step: the cluster's outcome, and whether the reference stops there.
EvictDeviceStep(n) ==
    [s |-> Decided("EvictDevice", [v \in Views |-> EvictDeviceAs(n, v)]),
     halt |-> EvictWritesBack /\ ~EvictedAs(State, n, ClusterView).ok]

(* EvictDevice's effect: the node off L1 (and under EvictWritesBack its write-back:
   host evictions, the object, the copy, its spill queued), or the reference's stop. *)
EvictDeviceTo(e) ==
    /\ nodes' = e.s.nodes
    /\ dev_free' = e.s.dev_free
    /\ dev_content' = e.s.dev_content
    /\ l2_free' = e.s.l2_free
    /\ objects' = e.s.objects
    /\ host_content' = e.s.host_content
    /\ spill_queue' = e.s.spill_queue
    /\ diverged' = e.s.diverged
    /\ halted' = IF e.halt THEN "EvictDevice" ELSE halted
    /\ UNCHANGED <<next_id, clock, requestVars, backupVars, loadVars, l3Vars>>

EvictDevice(n) ==
    /\ RoundClosed
    /\ n \in DOMAIN nodes
    /\ IsDeviceVictim(n, ClusterView)
    /\ EvictDeviceTo(EvictDeviceStep(n))

(* Under WriteBackEvict = "deferred", the reference's own order: as EvictAllSync,
   but a victim written back stays on L1 until every victim has been taken (it is
   evicted after the loop, `later`), and each victim is first re-checked: a child
   of it still on L1 (a victim deferred before it) makes the reference raise
   "plan diverged before reservation" (`halt`). Under "deferred_fixed" the re-check
   counts the victims it deferred as evicted, and never halts. *)
EvictAllDeferred(s, victims, keep, v) ==
    LET after[k \in Nat] ==
            IF k = 0 THEN [s |-> s, ok |-> TRUE, halt |-> FALSE, later |-> <<>>]
            ELSE LET r == after[k - 1]
                     n == victims[k]
                 IN IF ~r.ok \/ r.halt THEN r
                    ELSE IF WriteBackEvict = "deferred" /\ ChildOnL1(r.s.nodes, n) THEN [r EXCEPT !.halt = TRUE]
                    ELSE IF r.s.nodes[n].host # NoObject THEN [r EXCEPT !.s = EvictDeviceNode(@, n)]
                    ELSE LET len == Len(r.s.nodes[n].key)
                             hv == HostVictims(r.s) \ keep
                             room0 == HostRoom(r.s, RoomNeed(len, v), TLCEval(VictimKeys(r.s.nodes, hv, v)), hv)
                             room == IF Bug = "backup_host_uaf" /\ ~room0.ok THEN InflightRoom(room0.s, RoomNeed(len, v)) ELSE room0
                         IN IF HasRoom(room.s.l2_free, len)
                            THEN [r EXCEPT !.s = WrittenBack(room.s, n), !.later = Append(@, n)]
                            ELSE IF Bug = "write_back_fail_evict"
                            THEN [r EXCEPT !.s = [FreeDev(room.s, room.s.nodes[n].dev) EXCEPT !.nodes[n].dev = <<>>]]
                            ELSE [r EXCEPT !.ok = FALSE]
        last == after[Len(victims)]
    IN [s |-> IF last.ok /\ ~last.halt THEN EvictAll(last.s, last.later) ELSE last.s, ok |-> last.ok, halt |-> last.halt]

(* A load-back's plan lp (LoadBackPlan) with its evictions done: `ev` is the state
   after them and whether every write-back fit. The nodes it restores are kept from
   its write-backs' host eviction, but under loadback_evicts_own_host. *)
WithEvictions(s, lp) ==
    LET keep == IF Bug = "loadback_evicts_own_host" THEN {} ELSE Range(lp.run)
        ev == IF lp.remaining # [lane \in Ranks |-> 0] THEN [s |-> s, ok |-> FALSE, halt |-> FALSE]
              ELSE IF WriteBackEvict \in {"deferred", "deferred_fixed"} /\ SyncWriteBack THEN EvictAllDeferred(s, lp.victims, keep, lp.view)
              ELSE IF SyncWriteBack THEN LET e == EvictAllSync(s, lp.victims, keep, lp.view)
                                         IN [s |-> e.s, ok |-> e.ok, halt |-> FALSE]
              ELSE [s |-> EvictAll(s, lp.victims), ok |-> TRUE, halt |-> FALSE]
    IN [run |-> lp.run, lanes |-> lp.lanes, victims |-> lp.victims, remaining |-> lp.remaining, ev |-> ev]

\* The owner-lane planner's plan lp frees every page the load-back lacks in its lanes
\* (and every write-back it makes fits).
LoadBackFits(lp) == lp.remaining = [lane \in Ranks |-> 0] /\ lp.ev.ok /\ ~lp.ev.halt

\* The plan lp makes the reference raise before it takes a victim (WriteBackEvict =
\* "deferred"): the step records where the reference stops, and changes nothing else.
LoadBackHalts(lp) ==
    /\ lp.remaining = [lane \in Ranks |-> 0] /\ lp.ev.halt
    /\ halted' = "LoadBack"
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, backupVars, loadVars, spill_queue, l3Vars, diverged>>

(* Under load_host_release the host copy is released when the load is issued, as
   though its copies were done: the loaded nodes `ns` become unbacked device nodes
   and their objects are freed (poisoned) while every rank's copy still reads them. *)
ReleasedAtIssue(s, ns) ==
    IF Bug # "load_host_release" THEN s
    ELSE LET objs == {s.nodes[n].host : n \in ns}
             gone == UNION {ObjectPages(s.objects[k]) : k \in objs}
         IN [s EXCEPT !.l2_free = @ \cup gone,
                      !.host_content = [h \in gone |-> NoContent] @@ @,
                      !.objects = Remove(@, objs),
                      !.nodes = [n \in DOMAIN s.nodes |->
                                   IF n \in ns THEN [s.nodes[n] EXCEPT !.host = NoObject, !.durable = FALSE]
                                   ELSE s.nodes[n]]]

\* The load-back of request rid along the owner-lane planner's plan lp.
LoadedBack(s, rid, lp) ==
    LET req == s.requests[rid]
        run == lp.run
        sizes == [k \in DOMAIN run |-> Len(s.nodes[run[k]].key)]
        count == SumSeq(sizes)
        start == [k \in DOMAIN run |-> SumSeq(SubSeq(sizes, 1, k - 1))]
        s1 == lp.ev.s
        got == Alloc(s1.dev_free, lp.lanes)
        \* page i of the run is loaded from this host page, as gathered before the evictions
        source == [i \in 1 .. count |->
                     LET k == CHOOSE k \in DOMAIN run : start[k] < i /\ i <= start[k] + sizes[k]
                     IN ObjPage(s.objects[s.nodes[run[k]].host], i - start[k])]
        \* a node of the run that host eviction took (loadback_evicts_own_host) is gone:
        \* the pages it was given are held by no node while the load copies into them
        alive == SelectSeq(run, LAMBDA n : n \in DOMAIN s1.nodes)
        last == IF alive = <<>> THEN req.node ELSE alive[Len(alive)]
        loaded == [n \in DOMAIN s1.nodes |->
                     IF n \in Range(run)
                     THEN LET k == IndexOf(run, n)
                          IN [s1.nodes[n] EXCEPT !.dev = SubSeq(got.pages, start[k] + 1, start[k] + sizes[k])]
                     ELSE s1.nodes[n]]
    IN ReleasedAtIssue([s1 EXCEPT
          !.nodes = LockPath(LockPath(loaded, last, 2), req.node, -1),
          !.dev_free = got.free,
          !.loads = Append(@, [node |-> last, pages |-> [i \in 1 .. count |-> <<got.pages[i], source[i]>>]]),
          !.requests[rid].node = last], Range(alive))

\* The load-back, its carried host hit used (its pin released).
LoadedBackHit(s, rid, lp) == DroppedHit(LoadedBack(s, rid, lp), rid)

\* LoadBack's effect: the evictions, the pages taken, the load issued and the lock moved
\* (and under load_host_release the host copies released).
LoadBackTo(s) ==
    /\ nodes' = s.nodes
    /\ dev_free' = s.dev_free
    /\ requests' = s.requests
    /\ dev_content' = s.dev_content
    /\ loads' = s.loads
    /\ diverged' = s.diverged
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ host_content' = s.host_content
    /\ spill_queue' = s.spill_queue
    /\ UNCHANGED <<halted, next_id, clock, next_rid, prepared, backupVars, load_done, l3Vars>>

(* LoadBack with the cluster's plan `plan`: the plan is the costly part, so it is
   an argument, which TLC evaluates once (it evaluates a LET of an action at every
   use); each other rank's view under a defect has its own. *)
LoadBackAlong(rid, plan) ==
    /\ LoadBackFits(plan)
    /\ LoadBackTo(Decided("LoadBack", [v \in Views |-> LET lp == IF v = ClusterView THEN plan
                                                               ELSE WithEvictions(State, LoadBackPlan(State, requests[rid], v))
                                                       IN IF LoadBackFits(lp) THEN LoadedBackHit(State, rid, lp)
                                                          ELSE NoOutcome]))

\* The load-back along the plan, or (WriteBackEvict = "deferred") the reference's stop.
LoadBackWith(rid, plan) == LoadBackHalts(plan) \/ LoadBackAlong(rid, plan)

(* Load the L2-only nodes below a matched request's lock back to L1, all or
   nothing, when they cover at least LoadBackThreshold tokens: page i of the
   run goes to lane i mod R, and the owner-lane planner frees what the lanes
   lack. The copies are issued, not done (LoadDone): the load locks the path
   down to the deepest loaded node, and the request's lock moves there. *)
LoadBack(rid) ==
    /\ RoundClosed
    /\ InPhase(rid, "matched")
    /\ CarryHostHit => requests[rid].hit \in DOMAIN nodes
    /\ HostHit(rid) > 0
    /\ HostHit(rid) * P >= LoadBackThreshold
    /\ LoadBackWith(rid, WithEvictions(State, LoadBackPlan(State, requests[rid], ClusterView)))

\* Rank r has a load-back in flight whose copies it has not done.
LoadLeft(r) == load_done[r] < Len(loads)

(* Rank r's copies of its oldest load-back it has not done complete (the
   reference's loading_check, per rank, no MIN): the pages in its lane receive
   the host pages' content. Once every rank has done the oldest load, it leaves
   `loads` and its lock is released. *)
LoadDone(r) ==
    /\ r \in Ranks
    /\ LoadLeft(r)
    /\ LET op == loads[load_done[r] + 1]
           mine == {k \in 1 .. Len(op.pages) : Lane(op.pages[k][1]) = r}
           done == [load_done EXCEPT ![r] = @ + 1]
           pop == \A q \in Ranks : done[q] > 0
           \* no rank has done this load before r
           first == \A q \in Ranks : load_done[q] <= load_done[r]
       IN /\ dev_content' = [p \in {op.pages[k][1] : k \in mine} |->
                               host_content[op.pages[CHOOSE k \in mine : op.pages[k][1] = p][2]]] @@ dev_content
          \* the defect load_uaf: a rank's load lock released before its own copy lands
          \* (the load's lock goes at the first rank's copy, not the last: its nodes can be
          \* evicted, their pages reused, while the other ranks' copies still land; the
          \* reference's loading_check releases each rank's lock at its own copy)
          /\ nodes' = IF Bug = "load_uaf"
                       THEN IF first THEN LockPath(nodes, op.node, -1) ELSE nodes
                       ELSE IF pop THEN LockPath(nodes, loads[1].node, -1) ELSE nodes
          /\ loads' = IF pop THEN Tail(loads) ELSE loads
          /\ load_done' = IF pop THEN [q \in Ranks |-> done[q] - 1] ELSE done
    /\ UNCHANGED <<next_id, clock, requestVars, dev_free, hostVars, backupVars, spill_queue, l3Vars,
                   diverged, halted>>

-----------------------------------------------------------------------------
(* L3: each rank's disk, addressed by page hash. A page inside an L2 object or
   a reload belongs to rank i mod R, i its 0-based index in it; ranks copy only
   the pages they own. Every L3 step needs an L3 tier (L3 > 0). *)

(* Spills. Commit (and a split of a backed node, for its new upper object)
   queues committed objects; SpillSubmit drops the queue's head entries that are
   no longer spillable and submits the first spillable one, pinning its node. *)

Spillable(n) ==
    /\ n \in DOMAIN nodes
    /\ nodes[n].host = n
    /\ ~nodes[n].durable
    /\ nodes[n].pin = 0
    /\ n \in DOMAIN objects
    /\ objects[n].committed

(* The reference maintainer's own-disk shortcut (OwnDiskDurable = "reference"):
   rank v's disk holds every page it owns of a node with hashes hs (its
   exists_prefix over the whole node; a node of fewer than R pages may have none
   on rank v). NoView, the replicated decision, takes no shortcut. *)
OwnDiskHolds(s, v, hs) == v # NoView /\ \A i \in Owned(v, Len(hs)) : hs[i + 1] \in DOMAIN s.l3[v]

(* The shortcut read from a shared index (OwnDiskDurable = "shared"): every page
   of the node is on some rank's disk, whichever rank owns it now. Every rank
   reads the same index, so the decision is replicated. *)
SharedIndexHolds(s, hs) == \A i \in 1 .. Len(hs) : \E q \in Ranks : hs[i] \in DOMAIN s.l3[q]

\* The shortcut as rank v (NoView: the replicated decision) takes it.
ShortcutHolds(s, v, hs) == IF OwnDiskDurable = "shared" THEN SharedIndexHolds(s, hs)
                           ELSE OwnDiskHolds(s, v, hs)

(* The queue's head entries that are no longer spillable are dropped and the
   first spillable one is submitted, as rank v takes it: under the shortcut a
   spillable entry whose pages rank v's disk holds is marked durable (`marked`)
   and dropped too. *)
RECURSIVE SubmitFrom(_, _, _, _)
SubmitFrom(s, q, v, marked) ==
    IF q = <<>> THEN [rest |-> <<>>, node |-> NoNode, marked |-> marked]
    ELSE IF ~Spillable(Head(q)) \/ Head(q) \in marked THEN SubmitFrom(s, Tail(q), v, marked)
    ELSE IF ShortcutHolds(s, v, NodeHashes(s.nodes, Head(q)))
    THEN SubmitFrom(s, Tail(q), v, marked \cup {Head(q)})
    ELSE [rest |-> Tail(q), node |-> Head(q), marked |-> marked]

SpillSubmitted(s, v) ==
    LET sub == SubmitFrom(s, s.spill_queue, v, {})
        ns == [n \in DOMAIN s.nodes |->
                 IF n \in sub.marked THEN [s.nodes[n] EXCEPT !.durable = TRUE] ELSE s.nodes[n]]
    IN IF sub.node = NoNode THEN [s EXCEPT !.spill_queue = sub.rest, !.nodes = ns]
       ELSE [s EXCEPT !.spill_queue = sub.rest, !.nodes = [ns EXCEPT ![sub.node].pin = @ + 1],
                      !.spills = Append(@, [node |-> sub.node, hashes |-> NodeHashes(s.nodes, sub.node),
                                            pinned |-> TRUE])]

(* Decided, for SpillSubmit under the shortcut: every rank decides from its own
   disk (a rank-local fact, no MIN), the state follows rank 0's decision, and
   another rank that decides otherwise is recorded in `diverged`. *)
OwnDiskDecided(out) ==
    LET first == out[0]
        others == IF diverged # <<>> THEN {}
                  ELSE {v \in Ranks \ {0} : Replicated(out[v]) # Replicated(first)}
    IN IF others = {} THEN first
       ELSE [first EXCEPT !.diverged = [action |-> "SpillSubmit", ranks |-> others]]

SpillSlotFree == Len(spills) < SpillInflight

\* SpillSubmit's effect: entries dropped (or marked durable), a node pinned and its spill submitted.
SpillSubmitTo(s) ==
    /\ nodes' = s.nodes
    /\ spill_queue' = s.spill_queue
    /\ spills' = s.spills
    /\ diverged' = s.diverged
    /\ UNCHANGED <<halted, next_id, clock, requestVars, deviceVars, hostVars, backupVars, loadVars,
                   spill_gathered, spill_done, spill_staged, reloadVars, diskVars>>

SpillSubmit ==
    /\ RoundClosed
    /\ L3 > 0
    /\ spill_queue # <<>>
    /\ SpillSlotFree
    /\ SpillSubmitTo(IF OwnDiskDurable = "reference"
                     THEN OwnDiskDecided([v \in Ranks |-> SpillSubmitted(State, v)])
                     ELSE SpillSubmitted(State, NoView))

\* Rank r has a spill in flight it has not gathered.
SpillToGather(r) == spill_gathered[r] < Len(spills)

(* Rank r gathers the pages it owns of its next spill out of the shared slab,
   from the run fixed at submit: the node may have been split meanwhile (its
   lower part keeps the object key and the run's end, and stays pinned until
   every rank has gathered), so the run starts Len(op.hashes) before the end. *)
SpillGathered(r) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ SpillToGather(r)
    /\ LET op == spills[spill_gathered[r] + 1]
           base == objects[op.node].base + objects[op.node].length - Len(op.hashes)
           own == OwnedSeq(r, Len(op.hashes))
       IN spill_staged' = [spill_staged EXCEPT ![r] =
                             Append(@, [k \in DOMAIN own |-> <<op.hashes[own[k] + 1],
                                                               host_content[base + own[k]]>>])]
    /\ spill_gathered' = [spill_gathered EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, backupVars, loadVars, spill_queue,
                   spills, spill_done, reloadVars, diskVars, diverged, halted>>

\* Rank r has a gathered spill it has not written.
SpillToWrite(r) == Len(spill_done[r]) < spill_gathered[r]

\* Rank r's next spill write succeeds: its disk works and has room for the new pages.
SpillWriteOk(r) ==
    LET staged == Head(spill_staged[r])
        new == {k \in DOMAIN staged : staged[k][1] \notin DOMAIN l3[r]}
    IN disk_ok[r] /\ Cardinality(DOMAIN l3[r]) + Cardinality(new) <= L3

\* Rank r writes its oldest gathered spill to its disk, ok or not.
SpillDone(r, ok) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ SpillToWrite(r)
    /\ ok = SpillWriteOk(r)
    /\ LET staged == Head(spill_staged[r])
           hs == {staged[k][1] : k \in DOMAIN staged}
       IN l3' = IF ok THEN [l3 EXCEPT ![r] = [h \in hs |-> (CHOOSE p \in Range(staged) : p[1] = h)[2]] @@ @]
                \* the defect failed_store_visible: the failed write leaves its pages in the
                \* disk's index, holding nothing valid
                ELSE IF Bug = "failed_store_visible" THEN [l3 EXCEPT ![r] = [h \in hs |-> NoContent] @@ @]
                ELSE l3
    /\ spill_staged' = [spill_staged EXCEPT ![r] = Tail(@)]
    /\ spill_done' = [spill_done EXCEPT ![r] = Append(@, ok)]
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, backupVars, loadVars, spill_queue,
                   spills, spill_gathered, reloadVars, disk_ok, disk_faults, diverged, halted>>

\* The ops every rank has gathered, and those every rank has written.
SpillsGathered == Min({spill_gathered[r] : r \in Ranks})
SpillsWritten == Min({Len(spill_done[r]) : r \in Ranks})

\* SpillAck has something to do: an op every rank wrote, or a pin to release
\* (no rank writes an op before it gathers it).
SpillAckDue == {j \in 1 .. SpillsGathered : j <= SpillsWritten \/ spills[j].pinned} # {}

SpillAcked(s) ==
    LET g == Min({s.spill_gathered[r] : r \in Ranks})
        d == Min({Len(s.spill_done[r]) : r \in Ranks})
        unpin == {j \in 1 .. g : s.spills[j].pinned}
        written(j) ==
            LET op == s.spills[j]
                n == op.node
            IN /\ n \in DOMAIN s.nodes
               /\ s.nodes[n].host = n
               /\ \A r \in Ranks : s.spill_done[r][j]
               /\ \/ DurableSplit = "reference"
                  \/ LET hs == NodeHashes(s.nodes, n)
                         off == Len(op.hashes) - Len(hs)
                     IN off >= 0 /\ off % R = 0 /\ SubSeq(op.hashes, off + 1, Len(op.hashes)) = hs
        durable == {s.spills[j].node : j \in {j \in 1 .. d : written(j)}}
    IN [s EXCEPT !.nodes = [n \in DOMAIN s.nodes |->
                              [s.nodes[n] EXCEPT !.pin = @ - Cardinality({j \in unpin : s.spills[j].node = n}),
                                                 !.durable = @ \/ n \in durable]],
                 !.spills = [j \in 1 .. Len(s.spills) - d |->
                               [s.spills[j + d] EXCEPT !.pinned = @ /\ j + d \notin unpin]],
                 !.spill_gathered = [r \in Ranks |-> s.spill_gathered[r] - d],
                 !.spill_done = [r \in Ranks |-> SubSeq(s.spill_done[r], d + 1, Len(s.spill_done[r]))]]

\* SpillAck's effect: pins released, nodes durable, acked spills gone.
SpillAckTo(s) ==
    /\ nodes' = s.nodes
    /\ spills' = s.spills
    /\ spill_gathered' = s.spill_gathered
    /\ spill_done' = s.spill_done
    /\ UNCHANGED <<next_id, clock, requestVars, deviceVars, hostVars, backupVars, loadVars,
                   spill_queue, spill_staged, reloadVars, diskVars, diverged, halted>>

(* The agreement of spills: the MIN over ranks of the ops gathered releases
   their pins; the MIN of the ops written, and the AND of their ok bits, marks
   durable the nodes whose pages every owner wrote. After a split the node keeps
   only a suffix of what was spilled; its pages' owners are the ranks that wrote
   them only if the offset is a multiple of R (DurableSplit = "reference", as the
   reference does, marks the node whatever the offset). *)
SpillAck ==
    /\ RoundClosed
    /\ L3 > 0
    /\ spills # <<>>
    /\ SpillAckDue
    /\ SpillAckTo(SpillAcked(State))

(* Reloads. A queued request whose key misses the tree at a node boundary below
   its deepest whole match (the anchor) may be marked, once, as a candidate for
   a reload of the missing suffix. *)

HasReloadTarget(rid) == ReloadTarget(nodes, requests[rid]).anchor # NoNode

ReloadMark(rid) ==
    /\ RoundClosed
    /\ L3 > 0
    /\ InPhase(rid, "queued")
    /\ ~requests[rid].tried
    /\ HasReloadTarget(rid)
    /\ reload_candidates' = (rid :> ReloadTarget(nodes, requests[rid])) @@ reload_candidates
    /\ requests' = [requests EXCEPT ![rid].tried = TRUE]
    /\ UNCHANGED <<treeVars, next_rid, prepared, deviceVars, hostVars, backupVars, loadVars,
                   spill_queue, spillVars, reloads, reload_done, diskVars, diverged, halted>>

\* A reload claims at least the pages a load-back would need.
ReloadFloor == Max2(1, LoadBackThreshold \div P)

(* Decide candidate rid: claim the pages every rank has (at least the
   load-back floor, and a clean attach); join the in-flight reload of the same
   pages, or reserve an L2 object for a new one (evicting host leaves to fit, as
   Reserve does, and keeping the evictions when it cannot fit). Otherwise only
   the mark is dropped and the request recomputes.
   Every outcome is a step: the decision is the effect, not a guard. *)
ReloadReserved(s, rid, v) ==
    LET cand == s.reload_candidates[rid]
        s0 == [s EXCEPT !.reload_candidates = Remove(@, {rid})]
        c == Claimable(s, cand.hashes, v)
        key == cand.hashes[c]
        same == {j \in DOMAIN s.reloads : s.reloads[j].key = key}
        room == HostRoomAs(s0, s, RoomNeed(c, v), v)
        base == FirstFit(room.s.l2_free, c)
    IN IF c < ReloadFloor \/ ~AttachOk(s.nodes, cand.anchor, cand.tokens, cand.hashes[1], cand.ns)
       THEN s0
       ELSE IF same # {}
       THEN LET j == CHOOSE j \in same : TRUE
            IN [s0 EXCEPT !.reloads[j].waiters = Append(@, rid)]
       ELSE IF Len(s.reloads) >= ReloadInflight
       THEN s0
       \* cannot fit even after evicting the snapshot: the evictions stay (the run is
       \* the whole claim's; under local_host_alloc rank v made room for its own pages)
       ELSE IF ~HasRun(room.s.l2_free, c)
       THEN room.s
       ELSE [room.s EXCEPT
               !.l2_free = @ \ (base .. base + c - 1),
               !.reloads = Append(@, [key |-> key, anchor |-> cand.anchor,
                                      tokens |-> SubSeq(cand.tokens, 1, c),
                                      hashes |-> SubSeq(cand.hashes, 1, c),
                                      waiters |-> <<rid>>, ttl |-> ReloadTTL,
                                      base |-> base, length |-> c, ns |-> cand.ns])]

\* ReloadReserve's effect: the mark dropped, the host victims released, the reload joined or reserved.
ReloadReserveTo(s) ==
    /\ nodes' = s.nodes
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ host_content' = s.host_content
    /\ reload_candidates' = s.reload_candidates
    /\ reloads' = s.reloads
    /\ diverged' = s.diverged
    /\ UNCHANGED <<halted, next_id, clock, requestVars, deviceVars, backupVars, loadVars, spill_queue,
                   spillVars, reload_done, diskVars>>

ReloadReserve(rid) ==
    /\ RoundClosed
    /\ L3 > 0
    /\ rid \in DOMAIN reload_candidates
    /\ ReloadReserveTo(Decided("ReloadReserve", [v \in Views |-> ReloadReserved(State, rid, v)]))

\* Rank r has a reload in flight it has not read.
ReloadToRead(r) == Len(reload_done[r]) < Len(reloads)

\* Rank r's next reload read succeeds: its disk works and holds every page it owns.
ReloadReadOk(r) ==
    LET op == reloads[Len(reload_done[r]) + 1]
    IN disk_ok[r] /\ \A i \in Owned(r, Len(op.hashes)) : op.hashes[i + 1] \in DOMAIN l3[r]

\* Rank r reads the pages it owns of its next reload from its disk into the object.
ReloadDone(r, ok) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ ReloadToRead(r)
    /\ ok = ReloadReadOk(r)
    /\ LET op == reloads[Len(reload_done[r]) + 1]
           \* the defect reload_fail_double_free: a failed read releases the pages it did
           \* not fill (the whole reservation) itself, while the reload keeps them for its
           \* admission, which frees them again
           gone == IF Bug = "reload_fail_double_free" /\ ~ok THEN ReloadPages(op) ELSE {}
       IN /\ host_content' = IF ok THEN [h \in {op.base + i : i \in Owned(r, Len(op.hashes))} |->
                                           l3[r][op.hashes[h - op.base + 1]]] @@ host_content
                             ELSE [h \in gone |-> NoContent] @@ host_content
          /\ l2_free' = l2_free \cup gone
    /\ reload_done' = [reload_done EXCEPT ![r] = Append(@, ok)]
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, objects, backupVars, loadVars,
                   spill_queue, spillVars, reload_candidates, reloads, diskVars, diverged, halted>>

\* Every rank has read the reload at the head of `reloads`.
HeadReloadRead == reloads # <<>> /\ \A r \in Ranks : reload_done[r] # <<>>

(* The agreement of reloads: once every rank has read the head reload, the AND
   of the ok bits decides. If it still holds requests, every rank read ok and
   the anchor still takes the suffix, one L2-only, durable node is inserted
   under the anchor; otherwise the reservation is freed. Either way its waiters
   are released (they match again). Under reload_stale_anchor admission trusts
   the check made at reserve: the node attaches under the anchor as it was then,
   still in the tree with a clean miss below it or not. *)
ReloadAdmit ==
    /\ RoundClosed
    /\ L3 > 0
    /\ HeadReloadRead
    /\ LET op == Head(reloads)
           pages == ReloadPages(op)
       IN IF /\ op.waiters # <<>>
             /\ \A r \in Ranks : reload_done[r][1]
             /\ (Bug = "reload_stale_anchor" \/ AttachOk(nodes, op.anchor, op.tokens, op.hashes[1], op.ns))
          THEN /\ nodes' = (next_id :> [parent |-> op.anchor, key |-> op.tokens, dev |-> <<>>,
                                        host |-> next_id, durable |-> TRUE, lock |-> 0, pin |-> 0,
                                        hits |-> 0, touched |-> clock + 1, ns |-> op.ns]) @@ nodes
               /\ objects' = (next_id :> [base |-> op.base, length |-> op.length, committed |-> TRUE,
                                          owner |-> next_id]) @@ objects
               /\ next_id' = next_id + 1
               /\ clock' = clock + 1
               /\ UNCHANGED <<l2_free, host_content>>
          ELSE /\ l2_free' = l2_free \cup pages
               /\ host_content' = [h \in pages |-> NoContent] @@ host_content
               /\ UNCHANGED <<nodes, objects, next_id, clock>>
    /\ reloads' = Tail(reloads)
    /\ reload_done' = [r \in Ranks |-> Tail(reload_done[r])]
    /\ UNCHANGED <<requestVars, deviceVars, backupVars, loadVars, spill_queue, spillVars,
                   reload_candidates, diskVars, diverged, halted>>

\* Some reload holds a request: the reload clock has something to release.
SomeReloadHolds == {j \in DOMAIN reloads : reloads[j].waiters # <<>>} # {}

\* One tick of the reload clock: the waiters of a reload whose ttl runs out are
\* released to recompute; its reservation stays until it is admitted or aborted.
ReloadExpire ==
    /\ RoundClosed
    /\ L3 > 0
    /\ SomeReloadHolds
    /\ reloads' = [j \in DOMAIN reloads |->
                     LET t == Max2(0, reloads[j].ttl - 1)
                     IN [reloads[j] EXCEPT !.ttl = t, !.waiters = IF t = 0 THEN <<>> ELSE @]]
    \* the defect lease_expiry_free: the lease's end releases the reservation of a reload
    \* that expires now with its waiters, while its reads are still in flight (its pages
    \* freed and poisoned, the reload keeping them)
    /\ LET gone == IF Bug = "lease_expiry_free"
                   THEN UNION {ReloadPages(reloads[j]) : j \in {k \in DOMAIN reloads : reloads[k].ttl = 1}}
                   ELSE {}
       IN /\ l2_free' = l2_free \cup gone
          /\ host_content' = [h \in gone |-> NoContent] @@ host_content
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, objects, backupVars, loadVars, spill_queue,
                   spillVars, reload_candidates, reload_done, diskVars, diverged, halted>>

(* Faults: a rank's disk starts or stops failing. While it fails, that rank's
   spill writes and reload reads are not ok. *)

(* MaxDiskFaults = 0 leaves the faults unbounded; -1 allows none (disk_faults < -1 never
   holds), so a model with L3 and no fault is finite. *)
FaultsLeft == MaxDiskFaults = 0 \/ disk_faults < MaxDiskFaults

DiskFail(r) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ disk_ok[r]
    /\ FaultsLeft
    /\ disk_ok' = [disk_ok EXCEPT ![r] = FALSE]
    /\ disk_faults' = disk_faults + 1
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, backupVars, loadVars, spill_queue,
                   spillVars, reloadVars, l3, diverged, halted>>

DiskRecover(r) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ ~disk_ok[r]
    /\ disk_ok' = [disk_ok EXCEPT ![r] = TRUE]
    /\ UNCHANGED <<treeVars, requestVars, deviceVars, hostVars, backupVars, loadVars, spill_queue,
                   spillVars, reloadVars, disk_faults, l3, diverged, halted>>

-----------------------------------------------------------------------------
(* Next quantifies over id spaces: request ids are bounded by the arrivals,
   split offsets by the longest prompt; node ids are unbounded in the spec and a
   model bounds them (NodeIds). Constant bounds also let TLC label each step with
   its transition's name. *)
RequestIds == IF MaxRequests > 0 THEN 0 .. MaxRequests - 1 ELSE Nat
NodeIds == Nat \ {Root}
SplitOffsets == 1 .. (IF Prompts = {} THEN 0 ELSE Max({Len(p.pages) : p \in Prompts})) - 1

Next ==
    \/ \E p \in Prompts : Arrive(next_rid, p.pages, p.out_pages, PromptNs(p))
    \/ \E rid \in RequestIds : Match(rid)
    \/ \E rid \in RequestIds : Insert(rid)
    \/ \E rid \in RequestIds : Finish(rid)
    \/ \E rid \in RequestIds : Abort(rid)
    \/ \E n \in NodeIds, at \in SplitOffsets : Split(n, at)
    \/ \E n \in NodeIds, at \in SplitOffsets : PruneStaleTail(n, at)
    \/ \E n \in NodeIds, fits \in BOOLEAN : Reserve(n, fits)
    \/ \E rid \in RequestIds, fits \in BOOLEAN : Prepare(rid, fits)
    \/ \E r \in Ranks : AckAppend(r)
    \/ AckAppendAll
    \/ \E r \in Ranks : WriteDone(r)
    \/ \E r \in Ranks : CommitCall(r)
    \/ Commit
    \/ \E n \in NodeIds : Rollback(n)
    \/ \E n \in NodeIds : EvictDevice(n)
    \/ \E n \in NodeIds : EvictHost(n)
    \/ \E rid \in RequestIds : LoadBack(rid)
    \/ \E r \in Ranks : LoadDone(r)
    \/ SpillSubmit
    \/ \E r \in Ranks : SpillGathered(r)
    \/ \E r \in Ranks, ok \in BOOLEAN : SpillDone(r, ok)
    \/ SpillAck
    \/ \E rid \in RequestIds : ReloadMark(rid)
    \/ \E rid \in RequestIds : ReloadReserve(rid)
    \/ \E r \in Ranks, ok \in BOOLEAN : ReloadDone(r, ok)
    \/ ReloadAdmit
    \/ ReloadExpire
    \/ \E r \in Ranks : DiskFail(r)
    \/ \E r \in Ranks : DiskRecover(r)

\* A request with a prepared backup settles it: it is inserted or aborted (the
\* scheduler runs every forward pass to its insert).
PreparedSettles(rid) ==
    /\ rid \in DOMAIN prepared
    /\ prepared[rid] # NoNode
    /\ Insert(rid) \/ Abort(rid)

(* The rank steps are fair: a rank appends the ack of each submitted write
   (AckTiming = "reference"; every rank at once under "lockstep"), a rank with a write to finish finishes it (strongly:
   a rank waiting in a round of the commit collective cannot, so a write is
   enabled only between rounds, as often as they end), every rank enters the
   commit collective while a backup is in flight, and what every rank finished
   is committed; a rank with a reload to read reads it, and
   what every rank read is admitted or aborted. The reload clock is fair too:
   while a reload holds a request, it ticks (ReloadExpire), which alone
   releases every held request within ReloadTTL ticks. Nothing else is fair:
   requests, evictions, spills and faults may stop at any point. *)
Fairness == /\ \A r \in Ranks : SF_vars(WriteDone(r))
            /\ \A r \in Ranks : WF_vars(CommitCall(r))
            /\ WF_vars(Commit)
            /\ \A r \in Ranks : WF_vars(\E ok \in BOOLEAN : ReloadDone(r, ok))
            /\ WF_vars(ReloadAdmit)
            /\ WF_vars(ReloadExpire)
            /\ IF PreparedBackups
               THEN \A rid \in RequestIds : WF_vars(PreparedSettles(rid))
               ELSE TRUE
            /\ IF AckTiming = "reference"
               THEN \A r \in Ranks : WF_vars(AckAppend(r))
               ELSE TRUE
               \* (strongly: it waits while a round of the commit collective is open)
            /\ IF AckTiming = "lockstep" THEN SF_vars(AckAppendAll) ELSE TRUE

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Invariants (MODEL.md section 6), named as kvsm/invariants.py names them. *)

\* Whether n's parent chain reaches `top` (Root, or Gone through a husk).
RECURSIVE ReachesTop(_, _, _)
ReachesTop(n, top, k) == n = top \/ (k > 0 /\ n \in DOMAIN nodes /\ n # Root /\ ReachesTop(nodes[n].parent, top, k - 1))

ReachesRoot(n, k) == ReachesTop(n, Root, k)

\* A husk (UnbackedEvict = "reference", EvictDeviceNode): on no tier, with children.
Husk(n) == /\ UnbackedEvict = "reference" /\ nodes[n].parent = Gone
           /\ nodes[n].dev = <<>> /\ nodes[n].host = NoObject /\ Children(nodes, n) # {}

\* 1. Parent links form a tree rooted at 0, but for the orphans: nodes off L1 whose
\*    chain ends at a husk; siblings differ in their first page or namespace; keys are non-empty
\*    (whole pages).
Tree ==
    /\ nodes[Root].parent = NoParent /\ nodes[Root].key = <<>>
    /\ nodes[Root].dev = <<>> /\ nodes[Root].host = NoObject
    /\ \A n \in DOMAIN nodes \ {Root} :
          /\ nodes[n].key # <<>>
          /\ \/ nodes[n].parent \in DOMAIN nodes /\ ReachesRoot(n, Cardinality(DOMAIN nodes))
             \/ Husk(n)
             \/ /\ UnbackedEvict = "reference" /\ nodes[n].dev = <<>> /\ nodes[n].parent \in DOMAIN nodes
                /\ ReachesTop(n, Gone, Cardinality(DOMAIN nodes))
    /\ \A a, b \in DOMAIN nodes \ {Root} :
          (a # b /\ nodes[a].parent = nodes[b].parent /\ nodes[a].key # <<>> /\ nodes[b].key # <<>>)
             => nodes[a].key[1] # nodes[b].key[1] \/ nodes[a].ns # nodes[b].ns

\* 2. Every node is on L1 or backed by a committed object; a node on L1 has its
\*    parent on L1 (or is a child of the root).
Residency ==
    \A n \in DOMAIN nodes \ {Root} :
        LET nd == nodes[n] IN
        /\ nd.dev # <<>> => Len(nd.dev) = Len(nd.key)
        /\ (nd.dev = <<>> /\ nd.parent # Gone) => nd.host # NoObject /\ nd.host \in DOMAIN objects /\ objects[nd.host].committed
        /\ (nd.dev # <<>> /\ nd.parent # Root) => nodes[nd.parent].dev # <<>>

\* 3. `lock` counts the holders (requests whose lock covers the node, its
\*    pending backup, and load-backs in flight whose lock covers it); a locked
\*    node is on L1.
Locks ==
    LET holders(n) == Cardinality({q \in DOMAIN requests :
                                     requests[q].phase # "queued" /\ n \in PathToRoot(nodes, requests[q].node)})
                      + Bit(n \in pending)
                      + Cardinality({j \in DOMAIN loads : n \in PathToRoot(nodes, loads[j].node)})
    IN /\ \A j \in DOMAIN loads : loads[j].node \in DOMAIN nodes
       /\ \A q \in DOMAIN requests :
              /\ requests[q].phase = "queued" => requests[q].node = Root
              /\ requests[q].node \in DOMAIN nodes
              /\ (requests[q].phase = "matched" /\ requests[q].node # Root) => nodes[requests[q].node].dev # <<>>
       /\ \A n \in DOMAIN nodes : nodes[n].lock = holders(n)
       /\ \A n \in DOMAIN nodes \ {Root} : nodes[n].lock > 0 => nodes[n].dev # <<>>

\* The node ids of the prepared backups not attached yet.
PreparedIds == {prepared[q] : q \in DOMAIN prepared} \ {NoNode}

\* 4. A pending backup is in `writes` once, its node locked, on L1, unbacked, not
\*    evictable (as the contract defines it, whatever defect the model has) and not
\*    split (its object still has the node's length). A prepared one belongs to a
\*    matched request, has an id taken and no node yet, an uncommitted object of
\*    its own, and a write no rank has finished.
Pending ==
    /\ Len(writes) = Cardinality(Range(writes))
    /\ Range(writes) = pending \cup PreparedIds
    /\ \A q \in DOMAIN prepared :
          /\ q \in DOMAIN requests /\ requests[q].phase = "matched"
          /\ prepared[q] # NoNode =>
                LET p == prepared[q]
                IN /\ p \notin DOMAIN nodes /\ p \notin pending /\ p < next_id
                   /\ p \in DOMAIN objects /\ ~objects[p].committed /\ objects[p].owner = p
                   /\ \A r \in Ranks : write_done[r] < IndexOf(writes, p)
    /\ \A n \in pending :
          /\ n \in DOMAIN nodes
          /\ nodes[n].lock > 0
          /\ nodes[n].dev # <<>>
          /\ nodes[n].host = NoObject
          /\ ~DevEvictableUnder(State, n, "none")
          /\ n \in DOMAIN objects
          /\ ~objects[n].committed
          /\ objects[n].length = Len(nodes[n].key)
    /\ \A r \in Ranks : write_done[r] \in 0 .. Len(writes)
    /\ \A r \in Ranks : IF AckTiming # "fixed" THEN acked[r] \in write_done[r] .. Len(writes)
                                                   ELSE acked[r] = 0

\* 5. The device pages of the nodes, of the requests and the free set partition
\*    the device pool: no leak, no double use. A load-back in flight copies each
\*    host page into the page its node holds at that page's index in its object.
DevicePages ==
    /\ UNION {Range(nodes[n].dev) : n \in DOMAIN nodes}
         \cup UNION {Range(requests[q].pages) : q \in DOMAIN requests} \cup dev_free = DevicePool
    /\ SumFn([n \in DOMAIN nodes |-> Len(nodes[n].dev)])
         + SumFn([q \in DOMAIN requests |-> Len(requests[q].pages)])
         + Cardinality(dev_free) = Cardinality(DevicePool)
    /\ \A j \in DOMAIN loads : \A k \in 1 .. Len(loads[j].pages) :
          LET p == loads[j].pages[k][1]
          IN \E n \in DOMAIN nodes :
                /\ p \in Range(nodes[n].dev)
                /\ nodes[n].host \in DOMAIN objects
                /\ ObjPage(objects[nodes[n].host], IndexOf(nodes[n].dev, p)) = loads[j].pages[k][2]

\* 6. The object ranges, the reloads' reservations and the free set partition
\*    the host pool; each object belongs to exactly one committed node or pending
\*    backup (a reload's reservation is part of the reload itself); a carried
\*    host hit still names a node with its L2 copy.
HostPages ==
    /\ \A k \in DOMAIN objects : ObjectPages(objects[k]) \subseteq HostPool
    /\ \A j \in DOMAIN reloads : ReloadPages(reloads[j]) \subseteq HostPool
    /\ UNION {ObjectPages(objects[k]) : k \in DOMAIN objects}
         \cup UNION {ReloadPages(reloads[j]) : j \in DOMAIN reloads} \cup l2_free = HostPool
    /\ SumFn([k \in DOMAIN objects |-> objects[k].length])
         + SumSeq([j \in DOMAIN reloads |-> reloads[j].length]) + Cardinality(l2_free) = L2
    \* (L2Alloc = "pages": an object lists `length` pages, the first its base)
    /\ L2Alloc = "pages" => \A k \in DOMAIN objects : /\ Len(objects[k].pages) = objects[k].length
                                                     /\ objects[k].base = objects[k].pages[1]
    /\ \A k \in DOMAIN objects :
          IF objects[k].committed
          THEN /\ objects[k].owner \in DOMAIN nodes
               /\ nodes[objects[k].owner].host = k
               /\ objects[k].length = Len(nodes[objects[k].owner].key)
          ELSE k \in pending \cup PreparedIds
    /\ \A n \in DOMAIN nodes :
          (nodes[n].host # NoObject /\ nodes[n].host \in DOMAIN objects) => objects[nodes[n].host].owner = n
    \* a carried host hit names a node that still holds its L2 copy (CarryHostHit)
    /\ \A q \in DOMAIN requests :
          requests[q].hit # Root => requests[q].hit \in DOMAIN nodes /\ nodes[requests[q].hit].host # NoObject

\* Device pages whose load-back copy is still in flight on their owner rank.
Copying == UNION {{loads[j].pages[k][1] : k \in {k \in 1 .. Len(loads[j].pages) :
                                                     j > load_done[Lane(loads[j].pages[k][1])]}} : j \in DOMAIN loads}

\* 7. Every page on L1, every page of a committed object and every L3 entry
\*    (and every page staged for a spill) holds the KV of the prefix it claims,
\*    but a page whose load-back copy is in flight holds nothing yet; free device
\*    pages are poisoned.
Content ==
    /\ \A n \in DOMAIN nodes \ {Root} :
          LET pre == Prefix(nodes, n)
              above == Len(pre) - Len(nodes[n].key)
              h == nodes[n].host
          IN /\ \A i \in DOMAIN nodes[n].dev :
                   dev_content[nodes[n].dev[i]] = IF nodes[n].dev[i] \in Copying THEN NoContent
                                                  ELSE NsPre(nodes[n].ns) \o SubSeq(pre, 1, above + i)
             /\ (h # NoObject /\ h \in DOMAIN objects) =>
                   \A i \in 1 .. Min2(objects[h].length, Len(nodes[n].key)) :
                       host_content[ObjPage(objects[h], i)] = NsPre(nodes[n].ns) \o SubSeq(pre, 1, above + i)
    /\ \A p \in dev_free : dev_content[p] = NoContent
    /\ \A r \in Ranks : \A h \in DOMAIN l3[r] : KeyOf(l3[r][h]) = h
    /\ \A r \in Ranks : \A j \in DOMAIN spill_staged[r] :
          \A k \in DOMAIN spill_staged[r][j] : KeyOf(spill_staged[r][j][k][2]) = spill_staged[r][j][k][1]

\* 8. A durable node's pages are each on its owner rank's disk (page i, 0-based,
\*    belongs to rank i mod R).
Durable ==
    \A n \in DOMAIN nodes : nodes[n].durable =>
        LET hs == NodeHashes(nodes, n) IN \A i \in DOMAIN hs : hs[i] \in DOMAIN l3[(i - 1) % R]

\* 9. A backed node (an admitted reload among them) has as many pages as its
\*    object; a reload claims as many pages as hashes, chained from its first;
\*    its waiters are distinct queued requests, candidates are queued and not
\*    held; the L3 caps hold.
Reload ==
    /\ \A n \in DOMAIN nodes \ {Root} :
          (nodes[n].host # NoObject /\ nodes[n].host \in DOMAIN objects)
             => objects[nodes[n].host].length = Len(nodes[n].key)
    /\ \A j \in DOMAIN reloads :
          LET op == reloads[j]
          IN /\ Len(op.tokens) = Len(op.hashes) /\ Len(op.hashes) >= 1
             /\ op.length = Len(op.hashes)
             /\ op.hashes[1] # <<>> /\ op.hashes[1][Len(op.hashes[1])] = op.tokens[1]
             /\ \A i \in 2 .. Len(op.hashes) : op.hashes[i] = op.hashes[i - 1] \o <<op.tokens[i]>>
             /\ op.key = op.hashes[Len(op.hashes)]
    /\ \A j, k \in DOMAIN reloads : j # k => reloads[j].key # reloads[k].key
    /\ \A j \in DOMAIN reloads : \A w \in DOMAIN reloads[j].waiters :
          /\ reloads[j].waiters[w] \in DOMAIN requests
          /\ requests[reloads[j].waiters[w]].phase = "queued"
    /\ \A j, k \in DOMAIN reloads : \A a \in DOMAIN reloads[j].waiters, b \in DOMAIN reloads[k].waiters :
          (j # k \/ a # b) => reloads[j].waiters[a] # reloads[k].waiters[b]
    /\ \A q \in DOMAIN reload_candidates :
          q \in DOMAIN requests /\ requests[q].phase = "queued" /\ ~Held(q)
    /\ Len(spills) <= SpillInflight /\ Len(reloads) <= ReloadInflight
    /\ Len(spill_queue) <= SpillQueueCap

\* 10. The counters the spec keeps: ids and stamps never run ahead of them; a
\*     node's pin counts the spills and the carried host hits that pin it; each rank's spill, reload and
\*     load-back progress is within what is in flight (a load every rank has
\*     done is no longer in flight); no disk holds more than L3 pages.
Counts ==
    /\ \A n \in DOMAIN nodes : n < next_id /\ nodes[n].touched <= clock
    /\ \A q \in DOMAIN requests : q < next_rid
    /\ \A n \in DOMAIN nodes : nodes[n].pin = Cardinality({j \in DOMAIN spills : spills[j].node = n /\ spills[j].pinned})
                                             + Cardinality({q \in DOMAIN requests : requests[q].hit = n /\ requests[q].hitpin})
    /\ \A r \in Ranks :
          /\ Len(spill_done[r]) <= spill_gathered[r]
          /\ spill_gathered[r] <= Len(spills)
          /\ Len(spill_staged[r]) = spill_gathered[r] - Len(spill_done[r])
          /\ Len(reload_done[r]) <= Len(reloads)
          /\ Cardinality(DOMAIN l3[r]) <= L3
          /\ load_done[r] <= Len(loads)
    /\ loads # <<>> => \E r \in Ranks : load_done[r] = 0

\* 12. Call k of the commit collective on every rank is one collective: in an
\*     open round no rank has returned early from the call another rank
\*     entered, and a round is open only while a backup is in flight.
Collectives ==
    /\ ~(\E r, q \in Ranks : commit_round[r] = 1 /\ commit_round[q] = 2)
    /\ (\E r \in Ranks : commit_round[r] # 0) => writes # <<>>

\* 13. Every rank takes the same decision at every replicated step: the model is
\*     collective-free (only a defect in RankViewBugs, or the own-disk shortcut of
\*     OwnDiskDurable = "reference", lets a rank decide otherwise).
Agreement == diverged = <<>>

\* 14. The reference never stops at a raise or an assert (its scheduler process would
\*     die): `halted` names the action at which a path modelled at the reference's
\*     value reaches one (WriteBackEvict = "deferred": a load-back's re-check of a
\*     planned victim finds a child it deferred for its write-back still on L1).
Running == halted = ""

\* 15. A request never holds KV computed in another namespace: every node is of
\*     its parent's namespace (but the root's children), the node a matched or
\*     decoding request holds and its carried host hit are of the request's (so
\*     its whole path is, and Content says what those pages hold), and every
\*     page an L3 reload has read holds the KV its key names in the reload's
\*     namespace (under L3Key = "tokens" a key names the tokens alone).
ReloadContent(op, i) == IF L3ByTokens THEN NsPre(op.ns) \o op.hashes[i] ELSE op.hashes[i]
Isolation ==
    /\ \A n \in DOMAIN nodes :
          (nodes[n].parent \in DOMAIN nodes /\ nodes[n].parent # Root) => nodes[nodes[n].parent].ns = nodes[n].ns
    /\ \A q \in DOMAIN requests : requests[q].phase # "queued" =>
          \A m \in ({requests[q].node, requests[q].hit} \ {Root}) \cap DOMAIN nodes : nodes[m].ns = requests[q].ns
    /\ \A j \in DOMAIN reloads :
          \A i \in 1 .. Min2(reloads[j].length, Len(reloads[j].hashes)) :
              host_content[reloads[j].base + i - 1] \in {NoContent, ReloadContent(reloads[j], i)}

\* The invariants the Python model checks of a state (kvsm.invariants.violations;
\* TypeOK is the spec's own), in an order that keeps each one's operators defined
\* (Tree first); `kvsm conform --bug` takes no step out of a state where it is false.
Healthy == Tree /\ Residency /\ Locks /\ Pending /\ DevicePages /\ HostPages
           /\ Content /\ Durable /\ Reload /\ Counts /\ Collectives /\ Agreement /\ Running /\ Isolation

-----------------------------------------------------------------------------
(* Liveness: every pending backup is eventually committed or rolled back. *)

\* For every node id n: (n \in pending) ~> (n \notin pending). Written with []
\* outside the quantifier, which says the same, TLC checks it as one tableau
\* instead of one branch per node id (6x faster on the deep model).
BackupsResolve == [](\A n \in NodeIds : n \in pending => <>(n \notin pending))

(* Liveness: every request a reload holds is eventually released (admitted,
   aborted, expired, or itself aborted), under the fairness above. *)
HeldReleased == [](\A rid \in RequestIds : Held(rid) => <>~Held(rid))

=============================================================================
