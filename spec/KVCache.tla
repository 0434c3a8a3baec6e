------------------------------- MODULE KVCache -------------------------------
(***************************************************************************)
(* A multi-rank tiered KV cache: every rank has a lane of device pages     *)
(* (L1), all ranks share one host pool (L2), and every rank has a disk of  *)
(* its own (L3, addressed by page hash). The KV of token prefixes lives in *)
(* a radix tree that every rank holds identically; the only cross-rank     *)
(* agreements are MINs (and ANDs) over per-rank progress counters: at      *)
(* Commit, SpillAck, ReloadReserve and ReloadAdmit.                        *)
(*                                                                         *)
(* The contract is ../shared/design/MODEL.md. The pure Python model in     *)
(* kvsm/ implements the same rules with the same names; `kvsm conform`     *)
(* checks that both produce the same state graph, `kvsm validate` that a   *)
(* log is a behaviour of this spec. docs/model.md records every choice.    *)
(*                                                                         *)
(* Units: a key is a sequence of page symbols (one symbol stands for the P *)
(* tokens of one page). The ghost content of a page is the prefix of page  *)
(* symbols whose KV it holds, up to and including the page itself; the     *)
(* empty prefix marks a poisoned (freed) page, since no page ever holds    *)
(* it. The Python model names the same content by a chained hash. A page  *)
(* hash (L3's address) is that content identity, so here it is the prefix  *)
(* too.                                                                    *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    R,                  \* ranks (context-parallel size)
    P,                  \* tokens per page
    L1,                 \* device pages per rank lane
    L2,                 \* pages in the shared host pool
    Policy,             \* "write_through" or "write_back"
    WriteThreshold,     \* hits that make a node eligible for a backup (write_through)
    LoadBackThreshold,  \* tokens a host hit must cover to be loaded back
    MaxRequests,        \* arrivals in all (0 = unbounded)
    MaxLive,            \* requests alive at once (0 = unbounded)
    Prompts,            \* request shapes [pages: Seq(Int), out_pages: Nat] that Next draws from
    L3,                 \* pages each rank's disk holds; 0 = no L3 tier (the L1/L2 spec)
    SpillQueueCap,      \* committed objects queued for a spill at most (more are dropped)
    SpillInflight,      \* spills in flight at most
    ReloadInflight,     \* reloads in flight at most
    ReloadTTL,          \* ticks a request may wait for a reload before it is released
    MaxDiskFaults,      \* DiskFail steps in all (0 = unbounded)
    \* Where the reference breaks an invariant, "reference" models it and "fixed" the
    \* model's repair (docs/model.md, the findings):
    UnbackedEvict,      \* "reference": an unbacked leaf with L2-only children is evicted, orphaning them
    DurableSplit        \* "reference": a split's lower part and a spill's ack keep/set durable whatever the offset

ASSUME /\ R \in Nat \ {0} /\ P \in Nat \ {0} /\ L1 \in Nat \ {0} /\ L2 \in Nat \ {0}
       /\ Policy \in {"write_through", "write_back"}
       /\ WriteThreshold \in Nat \ {0} /\ LoadBackThreshold \in Nat
       /\ MaxRequests \in Nat /\ MaxLive \in Nat
       /\ L3 \in Nat /\ SpillQueueCap \in Nat \ {0} /\ SpillInflight \in Nat \ {0}
       /\ ReloadInflight \in Nat \ {0} /\ ReloadTTL \in Nat \ {0} /\ MaxDiskFaults \in Nat
       /\ UnbackedEvict \in {"fixed", "reference"} /\ DurableSplit \in {"fixed", "reference"}

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
    requests,       \* request id -> [tokens, out_pages, phase, node, pages, tried]
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
    spill_staged    \* ghost: rank -> gathered, not yet written spills: Seq(<<hash, content>>) each

l3vars == <<spills, reload_candidates, reloads, spill_gathered, spill_done, reload_done,
            disk_ok, disk_faults, l3, spill_staged>>

vars == <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending,
          writes, requests, write_done, dev_content, host_content, spill_queue, l3vars>>

Root == 0
NoParent == -1      \* the root's parent
NoObject == -1      \* `host` of a node with no committed L2 copy
NoNode == -1
NoContent == <<>>   \* a poisoned page
Ranks == 0 .. R - 1
DevicePool == 0 .. R * L1 - 1
HostPool == 0 .. L2 - 1
Phases == {"queued", "matched", "decoding"}
WriteThrough == Policy = "write_through"

\* Device page p belongs to the lane of rank p mod R.
Lane(p) == p % R

EmptyFn == [x \in {} |-> 0]

-----------------------------------------------------------------------------
(* Types *)

ContentValues == Seq(Int)   \* prefixes of page symbols, <<>> when poisoned
NodeRec == [parent: Int, key: Seq(Int), dev: Seq(DevicePool), host: Int, durable: BOOLEAN,
            lock: Nat, pin: Nat, hits: Nat, touched: Nat]
RequestRec == [tokens: Seq(Int), out_pages: Nat, phase: Phases, node: Nat, pages: Seq(DevicePool),
               tried: BOOLEAN]
ObjectRec == [base: HostPool, length: Nat \ {0}, committed: BOOLEAN, owner: Nat]
SpillRec == [node: Nat, hashes: Seq(ContentValues), pinned: BOOLEAN]
CandidateRec == [anchor: Nat, tokens: Seq(Int), hashes: Seq(ContentValues)]
ReloadRec == [key: ContentValues, anchor: Nat, tokens: Seq(Int), hashes: Seq(ContentValues),
              waiters: Seq(Nat), ttl: Nat, base: HostPool, length: Nat \ {0}]

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

-----------------------------------------------------------------------------
Init ==
    /\ nodes = (Root :> [parent |-> NoParent, key |-> <<>>, dev |-> <<>>, host |-> NoObject,
                         durable |-> FALSE, lock |-> 0, pin |-> 0, hits |-> 0, touched |-> 0])
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

-----------------------------------------------------------------------------
(* Values *)

Min(S) == CHOOSE x \in S : \A y \in S : x <= y
Max(S) == CHOOSE x \in S : \A y \in S : x >= y
Max2(a, b) == IF a >= b THEN a ELSE b
Min2(a, b) == IF a <= b THEN a ELSE b
Range(s) == {s[i] : i \in DOMAIN s}
IndexOf(s, x) == CHOOSE i \in DOMAIN s : s[i] = x
Remove(f, S) == [x \in DOMAIN f \ S |-> f[x]]
Bit(b) == IF b THEN 1 ELSE 0

RECURSIVE SumSeq(_)
SumSeq(s) == IF s = <<>> THEN 0 ELSE Head(s) + SumSeq(Tail(s))

RECURSIVE SumFn(_)
SumFn(f) == IF DOMAIN f = {} THEN 0
            ELSE LET x == CHOOSE x \in DOMAIN f : TRUE
                 IN f[x] + SumFn(Remove(f, {x}))

RECURSIVE Flatten(_)
Flatten(ss) == IF ss = <<>> THEN <<>> ELSE Head(ss) \o Flatten(Tail(ss))

\* Lexicographic order on equal-length sequences of integers.
LexLess(a, b) == \E i \in DOMAIN a : a[i] < b[i] /\ \A j \in 1 .. i - 1 : a[j] = b[j]

\* The absolute positions (page k of a request counts from the root) of n pages from `start`.
Positions(start, n) == [j \in 1 .. n |-> start + j - 1]

-----------------------------------------------------------------------------
(* The whole state as one record. Transitions that evict and then allocate
   compose their effects as functions of this record and end with Become. *)

State == [nodes |-> nodes, next_id |-> next_id, clock |-> clock, next_rid |-> next_rid,
          dev_free |-> dev_free, l2_free |-> l2_free, objects |-> objects,
          pending |-> pending, writes |-> writes, requests |-> requests,
          write_done |-> write_done, dev_content |-> dev_content,
          host_content |-> host_content, spill_queue |-> spill_queue, spills |-> spills,
          reload_candidates |-> reload_candidates, reloads |-> reloads,
          spill_gathered |-> spill_gathered, spill_done |-> spill_done,
          reload_done |-> reload_done, disk_ok |-> disk_ok, disk_faults |-> disk_faults,
          l3 |-> l3, spill_staged |-> spill_staged]

Become(s) ==
    /\ nodes' = s.nodes
    /\ next_id' = s.next_id
    /\ clock' = s.clock
    /\ next_rid' = s.next_rid
    /\ dev_free' = s.dev_free
    /\ l2_free' = s.l2_free
    /\ objects' = s.objects
    /\ pending' = s.pending
    /\ writes' = s.writes
    /\ requests' = s.requests
    /\ write_done' = s.write_done
    /\ dev_content' = s.dev_content
    /\ host_content' = s.host_content
    /\ spill_queue' = s.spill_queue
    /\ spills' = s.spills
    /\ reload_candidates' = s.reload_candidates
    /\ reloads' = s.reloads
    /\ spill_gathered' = s.spill_gathered
    /\ spill_done' = s.spill_done
    /\ reload_done' = s.reload_done
    /\ disk_ok' = s.disk_ok
    /\ disk_faults' = s.disk_faults
    /\ l3' = s.l3
    /\ spill_staged' = s.spill_staged

-----------------------------------------------------------------------------
(* The tree *)

Children(ns, n) == {c \in DOMAIN ns : ns[c].parent = n}
ChildOnL1(ns, n) == \E c \in Children(ns, n) : ns[c].dev # <<>>

\* n and its ancestors, the root excluded: the nodes a lock on n covers.
RECURSIVE PathToRoot(_, _)
PathToRoot(ns, n) == IF n = Root THEN {} ELSE {n} \cup PathToRoot(ns, ns[n].parent)

\* The page symbols from the root through n.
RECURSIVE Prefix(_, _)
Prefix(ns, n) == IF n = Root THEN <<>> ELSE Prefix(ns, ns[n].parent) \o ns[n].key

\* The page hashes (content identities) of n's pages: the prefix through each.
NodeHashes(ns, n) ==
    LET pre == Prefix(ns, n)
        above == Len(pre) - Len(ns[n].key)
    IN [i \in 1 .. Len(ns[n].key) |-> SubSeq(pre, 1, above + i)]

\* The hashes of the pages `tokens` that follow the prefix `base`.
Chain(base, tokens) == [i \in 1 .. Len(tokens) |-> base \o SubSeq(tokens, 1, i)]

ChildWith(ns, n, sym) ==
    LET cs == {c \in Children(ns, n) : ns[c].key[1] = sym}
    IN IF cs = {} THEN NoNode ELSE CHOOSE c \in cs : TRUE

RECURSIVE CommonLen(_, _, _)
CommonLen(a, b, i) ==
    IF i < Len(a) /\ i < Len(b) /\ a[i + 1] = b[i + 1] THEN CommonLen(a, b, i + 1) ELSE i

(* Where a key leads: the nodes it covers whole (root to leaf), the pages they
   cover, and the node it diverges inside with the pages in common (`cut`,
   <<>> when none). A key that ends inside a node diverges there too. *)
RECURSIVE WalkFrom(_, _, _, _, _)
WalkFrom(ns, tokens, cur, i, full) ==
    LET c == IF i < Len(tokens) THEN ChildWith(ns, cur, tokens[i + 1]) ELSE NoNode
    IN IF c = NoNode THEN [full |-> full, covered |-> i, cut |-> <<>>]
       ELSE LET n == CommonLen(ns[c].key, SubSeq(tokens, i + 1, Len(tokens)), 0)
            IN IF n = Len(ns[c].key) THEN WalkFrom(ns, tokens, c, i + n, Append(full, c))
               ELSE [full |-> full, covered |-> i, cut |-> <<c, n>>]

WalkKey(ns, tokens) == WalkFrom(ns, tokens, Root, 0, <<>>)

LockPath(ns, n, delta) ==
    LET up == PathToRoot(ns, n)
    IN [m \in DOMAIN ns |-> IF m \in up THEN [ns[m] EXCEPT !.lock = @ + delta] ELSE ns[m]]

\* Every access bumps the clock; the path is touched root to leaf.
TouchPath(s, path) ==
    [s EXCEPT !.clock = @ + Len(path),
              !.nodes = [n \in DOMAIN s.nodes |->
                           IF n \in Range(path)
                           THEN [s.nodes[n] EXCEPT !.touched = s.clock + IndexOf(path, n)]
                           ELSE s.nodes[n]]]

\* Queue committed objects for a spill, in order, while the queue has room; with
\* no L3 tier nothing is queued.
Enqueue(q, ns) == IF L3 = 0 THEN q
                  ELSE q \o SubSeq(ns, 1, Min2(Len(ns), Max2(0, SpillQueueCap - Len(q))))

\* A node that cannot be split: its backup is pending (the reference splits a node an
\* in-flight spill pins).
Unsplittable(s, n) == n \in s.pending

(* Split n after `at` pages, as the reference does. The upper part is a new node
   (id next_id) with the first `at` pages, their device pages and, when backed,
   their host pages as a new object (queued for a spill); it inherits lock, hits
   and stamp, and is neither pinned nor durable (a new node of the reference has
   neither). The lower part keeps its id, its stamp, its object key and its pin;
   with DurableSplit = "fixed" it stays durable only if `at` is a multiple of R
   (else its pages' owners are not the ranks that wrote them to disk), the
   reference keeps the flag. Never called on an unsplittable node. *)
SplitNode(s, n, at) ==
    LET nd == s.nodes[n]
        u == s.next_id
        upper == [parent |-> nd.parent, key |-> SubSeq(nd.key, 1, at),
                  dev |-> IF nd.dev = <<>> THEN <<>> ELSE SubSeq(nd.dev, 1, at),
                  host |-> IF nd.host # NoObject THEN u ELSE NoObject,
                  durable |-> FALSE, lock |-> nd.lock, pin |-> 0,
                  hits |-> nd.hits, touched |-> nd.touched]
        lower == [nd EXCEPT !.parent = u, !.key = SubSeq(nd.key, at + 1, Len(nd.key)),
                            !.dev = IF nd.dev = <<>> THEN <<>> ELSE SubSeq(nd.dev, at + 1, Len(nd.dev)),
                            !.durable = nd.durable /\ (DurableSplit = "reference" \/ at % R = 0)]
        objs == IF nd.host = NoObject THEN s.objects
                ELSE LET o == s.objects[nd.host]
                     IN (u :> [o EXCEPT !.length = at, !.owner = u])
                        @@ [s.objects EXCEPT ![nd.host] = [o EXCEPT !.base = o.base + at,
                                                                    !.length = o.length - at]]
    IN [s EXCEPT !.nodes = (u :> upper) @@ [s.nodes EXCEPT ![n] = lower],
                 !.objects = objs,
                 !.next_id = u + 1,
                 !.spill_queue = IF nd.host = NoObject THEN @ ELSE Enqueue(@, <<u>>)]

-----------------------------------------------------------------------------
(* Victims, identical on every rank: ascending (hits >= 2, touched, id). *)

VictimKey(ns, n) == <<Bit(ns[n].hits >= 2), ns[n].touched, n>>

FirstVictim(ns, S) ==
    CHOOSE n \in S : \A m \in S \ {n} : LexLess(VictimKey(ns, n), VictimKey(ns, m))

RECURSIVE VictimOrder(_, _)
VictimOrder(ns, S) ==
    IF S = {} THEN <<>>
    ELSE LET v == FirstVictim(ns, S) IN <<v>> \o VictimOrder(ns, S \ {v})

(* Evictable from L1: on L1, unlocked, no pending backup, no child on L1, and
   either backed (it keeps its host copy) or, under write_through, unbacked with
   no children at all (it is deleted; one with host-only children would orphan
   them, which the reference does: UnbackedEvict = "reference"). Under
   write_back an unbacked leaf is written back first. *)
DevEvictable(s, n) ==
    LET nd == s.nodes[n]
    IN /\ n # Root
       /\ nd.dev # <<>>
       /\ nd.lock = 0
       /\ n \notin s.pending
       /\ ~ChildOnL1(s.nodes, n)
       /\ \/ nd.host # NoObject
          \/ WriteThrough /\ (UnbackedEvict = "reference" \/ Children(s.nodes, n) = {})

\* Evictable from L2: evicted from L1, backed, no children, unlocked, not pinned
\* by a spill.
HostEvictable(s, n) ==
    LET nd == s.nodes[n]
    IN /\ n # Root
       /\ nd.dev = <<>>
       /\ nd.host # NoObject
       /\ Children(s.nodes, n) = {}
       /\ nd.lock = 0
       /\ nd.pin = 0

DevVictims(s) == {n \in DOMAIN s.nodes : DevEvictable(s, n)}
HostVictims(s) == {n \in DOMAIN s.nodes : HostEvictable(s, n)}

-----------------------------------------------------------------------------
(* Pages *)

FreeIn(free, lane) == Cardinality({p \in free : Lane(p) = lane})

\* Allocate one device page per entry of `lanes`, each the lowest free page of its lane.
RECURSIVE Alloc(_, _)
Alloc(free, lanes) ==
    IF lanes = <<>> THEN [pages |-> <<>>, free |-> free]
    ELSE LET p == Min({q \in free : Lane(q) = Head(lanes)})
             rest == Alloc(free \ {p}, Tail(lanes))
         IN [pages |-> <<p>> \o rest.pages, free |-> rest.free]

\* (f @@ g is f where f is defined, else g: it overwrites the few pages a step touches.)
FreeDev(s, pages) ==
    [s EXCEPT !.dev_free = @ \cup Range(pages),
              !.dev_content = [p \in Range(pages) |-> NoContent] @@ @]

\* First fit: the lowest base of a free run of `len` host pages.
RunFree(free, b, len) == b .. b + len - 1 \subseteq free
HasRun(free, len) == \E b \in 0 .. L2 - len : RunFree(free, b, len)
FirstFit(free, len) == Min({b \in 0 .. L2 - len : RunFree(free, b, len)})

ObjectPages(o) == o.base .. o.base + o.length - 1

FreeObject(s, k) ==
    LET gone == ObjectPages(s.objects[k])
    IN [s EXCEPT !.l2_free = @ \cup gone,
                 !.host_content = [h \in gone |-> NoContent] @@ @,
                 !.objects = Remove(@, {k})]

\* n and every node below it.
RECURSIVE Subtree(_, _)
Subtree(ns, n) == {n} \cup UNION {Subtree(ns, c) : c \in Children(ns, n)}

(* Drop a device victim: a backed node keeps its host copy, an unbacked one is
   deleted. An unbacked one with (L2-only) children is a victim only under
   UnbackedEvict = "reference": the subtree below it becomes unreachable and
   leaves the tree, its objects stay allocated and owned by no node (leaked). *)
EvictDeviceNode(s, n) ==
    LET freed == FreeDev(s, s.nodes[n].dev)
    IN IF s.nodes[n].host # NoObject THEN [freed EXCEPT !.nodes[n].dev = <<>>]
       ELSE [freed EXCEPT !.nodes = Remove(@, Subtree(s.nodes, n))]

\* Drop a host victim: free its object and delete the node.
EvictHostNode(s, n) == [FreeObject(s, s.nodes[n].host) EXCEPT !.nodes = Remove(@, {n})]

(* Insert's room: evict device victims in victim order (never one of `keep`; a
   parent that becomes evictable joins the order) until every lane has
   need[lane] free pages. *)
RECURSIVE MakeRoom(_, _, _)
MakeRoom(s, need, keep) ==
    IF \A lane \in Ranks : FreeIn(s.dev_free, lane) >= need[lane] THEN [ok |-> TRUE, s |-> s]
    ELSE LET vs == DevVictims(s) \ keep
         IN IF vs = {} THEN [ok |-> FALSE, s |-> s]
            ELSE MakeRoom(EvictDeviceNode(s, FirstVictim(s.nodes, vs)), need, keep)

(* Reserve's room: release host victims from a snapshot of the host order taken
   before, retrying first fit after each; parents that become host leaves
   meanwhile wait for the next round. *)
RECURSIVE HostRoom(_, _, _)
HostRoom(s, len, victims) ==
    IF HasRun(s.l2_free, len) THEN [ok |-> TRUE, s |-> s]
    ELSE IF victims = <<>> THEN [ok |-> FALSE, s |-> s]
    ELSE HostRoom(EvictHostNode(s, Head(victims)), len, Tail(victims))

-----------------------------------------------------------------------------
(* The owner-lane planner (MODEL.md section 8), in its reference form: every
   round rescans the candidates and takes the smallest
   (-contribution, -unlock contribution, victim order). *)

LaneCounts(ns, n) == [lane \in Ranks |-> Cardinality({j \in DOMAIN ns[n].dev : Lane(ns[n].dev[j]) = lane})]

Contribution(ns, n, d) == LET c == LaneCounts(ns, n) IN SumSeq([i \in 1 .. R |-> Min2(c[i - 1], d[i - 1])])

\* Unlocked, on L1, no pending backup, evictable under the policy.
PlanBase(s, n) ==
    LET nd == s.nodes[n]
    IN n # Root /\ nd.dev # <<>> /\ nd.lock = 0 /\ n \notin s.pending
       /\ (nd.host # NoObject \/ WriteThrough)

\* Evictable once the planned victims are gone; an unbacked node (deleted when
\* evicted) must lose every child, and only to unbacked planned victims (under
\* UnbackedEvict = "reference", as in the reference, it may keep L2-only ones).
AfterPlan(s, n, planned) ==
    LET strict == s.nodes[n].host = NoObject /\ UnbackedEvict = "fixed"
    IN /\ PlanBase(s, n)
       /\ \A c \in Children(s.nodes, n) :
            IF c \in planned THEN ~(strict /\ s.nodes[c].host # NoObject)
            ELSE ~(s.nodes[c].dev # <<>> \/ strict)

\* What evicting n would unlock: the contribution of its nearest ancestor on L1.
RECURSIVE UnlockFrom(_, _, _, _)
UnlockFrom(s, a, d, planned) ==
    IF a = Root \/ a \in planned THEN 0
    ELSE IF s.nodes[a].dev = <<>> THEN UnlockFrom(s, s.nodes[a].parent, d, planned)
    ELSE IF ~PlanBase(s, a) THEN 0
    ELSE IF Contribution(s.nodes, a, d) > 0 THEN Contribution(s.nodes, a, d)
    ELSE UnlockFrom(s, s.nodes[a].parent, d, planned)

RECURSIVE NewCandidate(_, _, _)
NewCandidate(s, a, planned) ==
    IF a = Root \/ a \in planned THEN NoNode
    ELSE IF AfterPlan(s, a, planned) THEN a
    ELSE IF s.nodes[a].dev # <<>> THEN NoNode
    ELSE NewCandidate(s, s.nodes[a].parent, planned)

PlanScore(s, n, d, planned) ==
    LET c == Contribution(s.nodes, n, d)
        u == IF c > 0 THEN 0 ELSE UnlockFrom(s, s.nodes[n].parent, d, planned)
    IN <<-c, -u>> \o VictimKey(s.nodes, n)

RECURSIVE PlanFrom(_, _, _, _, _)
PlanFrom(s, d, cands, planned, victims) ==
    IF \A lane \in Ranks : d[lane] = 0 THEN [victims |-> victims, remaining |-> d]
    ELSE LET scored == {n \in cands : /\ n \notin planned
                                      /\ AfterPlan(s, n, planned)
                                      /\ LET sc == PlanScore(s, n, d, planned)
                                         IN sc[1] < 0 \/ sc[2] < 0}
         IN IF scored = {} THEN [victims |-> victims, remaining |-> d]
            ELSE LET v == CHOOSE v \in scored :
                             \A m \in scored \ {v} :
                                LexLess(PlanScore(s, v, d, planned), PlanScore(s, m, d, planned))
                     c == LaneCounts(s.nodes, v)
                     d2 == [lane \in Ranks |-> Max2(0, d[lane] - c[lane])]
                     p2 == planned \cup {v}
                     a == NewCandidate(s, s.nodes[v].parent, p2)
                 IN PlanFrom(s, d2, (cands \ {v}) \cup (IF a = NoNode THEN {} ELSE {a}),
                             p2, Append(victims, v))

Plan(s, deficits) == PlanFrom(s, deficits, DevVictims(s), {}, <<>>)

RECURSIVE EvictAll(_, _)
EvictAll(s, victims) ==
    IF victims = <<>> THEN s ELSE EvictAll(EvictDeviceNode(s, Head(victims)), Tail(victims))

-----------------------------------------------------------------------------
(* Backups *)

BackupCandidate(s, n) ==
    LET nd == s.nodes[n]
    IN /\ n # Root
       /\ nd.dev # <<>>
       /\ nd.host = NoObject
       /\ n \notin s.pending
       /\ IF WriteThrough THEN nd.hits >= WriteThreshold
          ELSE nd.lock = 0 /\ ~ChildOnL1(s.nodes, n)

-----------------------------------------------------------------------------
(* A match covers a prompt but its last page: the reference matches at most
   input_len - 1 tokens, floored to a page, which is one page short of the
   prompt's pages whatever its sub-page tail. *)
MatchKey(tokens) == SubSeq(tokens, 1, Len(tokens) - 1)

(* Load-back: the whole nodes directly below a request's lock, along its match
   key, that are only on L2. *)

RECURSIVE HostRunFrom(_, _, _, _, _)
HostRunFrom(ns, tokens, cur, i, run) ==
    LET c == IF i < Len(tokens) THEN ChildWith(ns, cur, tokens[i + 1]) ELSE NoNode
    IN IF c = NoNode THEN run
       ELSE IF \/ ns[c].dev # <<>>
               \/ ns[c].host = NoObject
               \/ i + Len(ns[c].key) > Len(tokens)
               \/ SubSeq(tokens, i + 1, i + Len(ns[c].key)) # ns[c].key
            THEN run
       ELSE HostRunFrom(ns, tokens, c, i + Len(ns[c].key), Append(run, c))

HostRun(ns, req) == HostRunFrom(ns, MatchKey(req.tokens), req.node, Len(Prefix(ns, req.node)), <<>>)


-----------------------------------------------------------------------------
(* Transitions. Each is its enabling condition followed by its effect. The
   effect of a transition that evicts, splits or allocates is computed by a pure
   operator over State (named for what it yields, e.g. Inserted) and taken by
   Apply: TLC caches what such operators define, where it would recompute the
   definitions of a LET written directly in an action at every use. *)

Apply(t) == t.ok /\ Become(t.s)

(* Requests. A request's lock covers its node and every ancestor (lock + 1 on
   each); page k of a request (counting from the root) lives in lane k mod R. *)

Arrive(rid, tokens, out_pages) ==
    /\ rid = next_rid
    /\ MaxRequests = 0 \/ next_rid < MaxRequests
    /\ MaxLive = 0 \/ Cardinality(DOMAIN requests) < MaxLive
    /\ out_pages \in Nat
    /\ requests' = (rid :> [tokens |-> tokens, out_pages |-> out_pages, phase |-> "queued",
                            node |-> Root, pages |-> <<>>, tried |-> FALSE]) @@ requests
    /\ next_rid' = next_rid + 1
    /\ UNCHANGED <<nodes, next_id, clock, dev_free, l2_free, objects, pending, writes,
                   write_done, dev_content, host_content, spill_queue, l3vars>>

RECURSIVE OnL1Run(_, _)
OnL1Run(ns, path) ==
    IF path = <<>> \/ ns[Head(path)].dev = <<>> THEN 0 ELSE 1 + OnL1Run(ns, Tail(path))

Matched(s, rid) ==
    LET req == s.requests[rid]
        w == WalkKey(s.nodes, MatchKey(req.tokens))
        split == w.cut # <<>> /\ ~Unsplittable(s, w.cut[1])
        \* stamped in the reference's order: the whole nodes, the node the match ends
        \* inside (before its split), then its new upper part
        s0 == TouchPath(s, IF w.cut = <<>> THEN w.full ELSE Append(w.full, w.cut[1]))
        path == IF split THEN Append(w.full, s.next_id) ELSE w.full
        s1 == IF split THEN TouchPath(SplitNode(s0, w.cut[1], w.cut[2]), <<s.next_id>>) ELSE s0
        k == OnL1Run(s1.nodes, path)
        last == IF k = 0 THEN Root ELSE path[k]
    IN [ok |-> TRUE,
        s |-> [s1 EXCEPT !.nodes = LockPath(@, last, 1),
                         !.requests[rid] = [req EXCEPT !.phase = "matched", !.node = last]]]

\* A request that an in-flight reload holds (it waits for the reload's admission).
Held(rid) == \E j \in DOMAIN reloads : rid \in Range(reloads[j].waiters)

(* Match the longest cached prefix (L1 or L2) of the request's key but its last
   page, splitting the node the match ends inside (not when it is unsplittable:
   the match then stops above it); touch the matched nodes root to leaf, the node
   it ends inside and its upper part; lock the path down to the deepest matched
   node on L1. A request marked for a reload, or held by one, waits. *)
Match(rid) ==
    /\ rid \in DOMAIN requests
    /\ requests[rid].phase = "queued"
    /\ rid \notin DOMAIN reload_candidates
    /\ ~Held(rid)
    /\ Apply(Matched(State, rid))

Inserted(s, rid) ==
    LET req == s.requests[rid]
        tokens == req.tokens
        w == WalkKey(s.nodes, tokens)
        stop == w.cut # <<>> /\ Unsplittable(s, w.cut[1])
        split == w.cut # <<>> /\ ~stop
        s0 == IF split THEN SplitNode(s, w.cut[1], w.cut[2]) ELSE s
        path == IF split THEN Append(w.full, s.next_id) ELSE w.full
        covered == IF split THEN w.covered + w.cut[2] ELSE w.covered
        fresh == IF stop THEN <<>> ELSE SubSeq(tokens, covered + 1, Len(tokens))
        sizes == [k \in DOMAIN path |-> Len(s0.nodes[path[k]].key)]
        depth == SumSeq(sizes)
        \* absolute positions of the pages to allocate: re-owned nodes, the new node, out_pages
        reown == [k \in DOMAIN path |-> IF s0.nodes[path[k]].dev = <<>>
                                         THEN Positions(SumSeq(SubSeq(sizes, 1, k - 1)), sizes[k])
                                         ELSE <<>>]
        offset == [k \in DOMAIN path |-> SumSeq([j \in 1 .. k - 1 |-> Len(reown[j])])]
        nReown == SumSeq([k \in DOMAIN path |-> Len(reown[k])])
        positions == Flatten(reown) \o Positions(depth, Len(fresh))
                     \o Positions(Len(tokens), req.out_pages)
        lanes == [i \in DOMAIN positions |-> Lane(positions[i])]
        need == [lane \in Ranks |-> Cardinality({i \in DOMAIN lanes : lanes[i] = lane})]
        room == MakeRoom(s0, need, Range(path))
        s1 == room.s
        got == Alloc(s1.dev_free, lanes)
        pages == got.pages
        filled == 1 .. nReown + Len(fresh)
        last == IF path = <<>> THEN Root ELSE path[Len(path)]
        newId == s1.next_id
        newNode == [parent |-> last, key |-> fresh,
                    dev |-> SubSeq(pages, nReown + 1, nReown + Len(fresh)),
                    host |-> NoObject, durable |-> FALSE, lock |-> 0, pin |-> 0,
                    hits |-> IF WriteThrough THEN 1 ELSE 0,
                    touched |-> s1.clock + Len(path) + 1]
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
    IN IF ~room.ok THEN [ok |-> FALSE, s |-> s]
       ELSE [ok |-> TRUE,
        s |-> [s1 EXCEPT
                 !.nodes = LockPath(LockPath(grown, final, 1), req.node, -1),
                 !.next_id = IF fresh = <<>> THEN @ ELSE @ + 1,
                 !.clock = @ + Len(path) + Bit(fresh # <<>>),
                 !.dev_free = got.free,
                 !.dev_content = [p \in {pages[i] : i \in filled} |->
                                    SubSeq(tokens, 1, positions[IndexOf(pages, p)] + 1)] @@ @,
                 !.requests[rid] = [req EXCEPT !.phase = "decoding", !.node = final,
                                               !.pages = SubSeq(pages, nReown + Len(fresh) + 1, Len(pages))]]]

(* After the forward pass, cache the request's pages: whole nodes on L1 are hits,
   whole nodes only on L2 get device pages back (their content recomputed), the
   node the key diverges inside is split (at a pending one caching stops above
   it) and the rest becomes one new node. Room comes from evicting device victims
   in victim order; the request also takes its out_pages. Its lock moves to the
   deepest node of its key. *)
Insert(rid) ==
    /\ rid \in DOMAIN requests
    /\ requests[rid].phase = "matched"
    /\ Apply(Inserted(State, rid))

\* The sequence s without its element x (s holds x at most once).
Without(s, x) == IF x \in Range(s) THEN LET j == IndexOf(s, x) IN SubSeq(s, 1, j - 1) \o SubSeq(s, j + 1, Len(s))
                 ELSE s

\* Release whatever the request holds: its lock (once matched), its pages, its
\* reload mark and its place among a reload's waiters.
Released(s, rid) ==
    LET req == s.requests[rid]
        freed == FreeDev(s, req.pages)
    IN [ok |-> TRUE,
        s |-> [freed EXCEPT !.nodes = IF req.phase # "queued" THEN LockPath(@, req.node, -1) ELSE @,
                            !.requests = Remove(@, {rid}),
                            !.reload_candidates = Remove(@, {rid}),
                            !.reloads = [j \in DOMAIN s.reloads |->
                                           [s.reloads[j] EXCEPT !.waiters = Without(@, rid)]]]]

Finish(rid) ==
    /\ rid \in DOMAIN requests
    /\ requests[rid].phase = "decoding"
    /\ Apply(Released(State, rid))

Abort(rid) ==
    /\ rid \in DOMAIN requests
    /\ Apply(Released(State, rid))

-----------------------------------------------------------------------------
(* Split is demand-driven: a queued request's match key, or a matched request's
   whole key, diverges inside the node (what its Match, or Insert, would split),
   and the node's backup is not pending. *)
Split(n, at) ==
    /\ n \in DOMAIN nodes
    /\ ~Unsplittable(State, n)
    /\ \E rid \in DOMAIN requests :
          \/ /\ requests[rid].phase = "queued"
             /\ WalkKey(nodes, MatchKey(requests[rid].tokens)).cut = <<n, at>>
          \/ /\ requests[rid].phase = "matched"
             /\ WalkKey(nodes, requests[rid].tokens).cut = <<n, at>>
    /\ Become(SplitNode(State, n, at))

-----------------------------------------------------------------------------
(* Backups: reserve an object (first fit, evicting host victims to fit), write
   it on every rank, commit what every rank finished, or roll it back. `fits` is
   the reserve's outcome, which the state decides: when the snapshot of host
   victims runs out first, the backup is skipped and the evictions made stay
   (the reference's evict-to-fit); a failed reserve with no victim is no step. *)

Reserved(s, n, fits) ==
    LET len == Len(s.nodes[n].key)
        room == HostRoom(s, len, VictimOrder(s.nodes, HostVictims(s)))
        s1 == room.s
        base == FirstFit(s1.l2_free, len)
    IN IF room.ok # fits THEN [ok |-> FALSE, s |-> s]
       ELSE IF ~fits THEN [ok |-> HostVictims(s) # {}, s |-> s1]
       ELSE [ok |-> TRUE,
        s |-> [s1 EXCEPT !.l2_free = @ \ (base .. base + len - 1),
                         !.objects = (n :> [base |-> base, length |-> len,
                                            committed |-> FALSE, owner |-> n]) @@ @,
                         !.pending = @ \cup {n},
                         !.writes = Append(@, n),
                         !.nodes[n].lock = @ + 1]]

Reserve(n, fits) ==
    /\ n \in DOMAIN nodes
    /\ BackupCandidate(State, n)
    /\ Apply(Reserved(State, n, fits))

(* The rank steps, WriteDone and Commit, assign the variables directly: they are
   what the fairness of the liveness property ranges over, and TLC evaluates
   them once per edge and per property branch. *)

\* Host content once rank r has copied the pages of write n that sit in its lane.
Stored(r, n) ==
    LET dev == nodes[n].dev
        base == objects[n].base
    IN [h \in {base + i - 1 : i \in {i \in DOMAIN dev : Lane(dev[i]) = r}} |->
          dev_content[dev[h - base + 1]]] @@ host_content

\* Rank r finishes its next write: it copies the pages in its lane into the object.
WriteDone(r) ==
    /\ r \in Ranks
    /\ write_done[r] < Len(writes)
    /\ host_content' = Stored(r, writes[write_done[r] + 1])
    /\ write_done' = [write_done EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending,
                   writes, requests, dev_content, spill_queue, l3vars>>

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
    /\ spill_queue' = Enqueue(spill_queue, SubSeq(writes, 1, m))
    /\ UNCHANGED <<next_id, clock, next_rid, dev_free, l2_free, requests, dev_content,
                   host_content, l3vars>>

\* The one agreement: the MIN over ranks of the writes each finished.
Commit ==
    /\ \A r \in Ranks : write_done[r] > 0
    /\ CommitFirst(Min({write_done[r] : r \in Ranks}),
                   Range(SubSeq(writes, 1, Min({write_done[r] : r \in Ranks}))))

\* Abandon a pending backup wherever it is in `writes`.
RolledBack(s, n) ==
    LET j == IndexOf(s.writes, n)
        freed == FreeObject(s, n)
    IN [ok |-> TRUE,
        s |-> [freed EXCEPT !.writes = SubSeq(@, 1, j - 1) \o SubSeq(@, j + 1, Len(@)),
                            !.write_done = [r \in Ranks |-> IF s.write_done[r] >= j
                                                              THEN s.write_done[r] - 1
                                                              ELSE s.write_done[r]],
                            !.pending = @ \ {n},
                            !.nodes[n].lock = @ - 1]]

Rollback(n) ==
    /\ n \in pending
    /\ Apply(RolledBack(State, n))

-----------------------------------------------------------------------------
(* Eviction *)

EvictDevice(n) ==
    /\ n \in DOMAIN nodes
    /\ DevEvictable(State, n)
    /\ n = FirstVictim(nodes, DevVictims(State))
    /\ Become(EvictDeviceNode(State, n))

EvictHost(n) ==
    /\ n \in DOMAIN nodes
    /\ HostEvictable(State, n)
    /\ n = FirstVictim(nodes, HostVictims(State))
    /\ Become(EvictHostNode(State, n))

LoadedBack(s, rid) ==
    LET req == s.requests[rid]
        run == HostRun(s.nodes, req)
        sizes == [k \in DOMAIN run |-> Len(s.nodes[run[k]].key)]
        count == SumSeq(sizes)
        start == [k \in DOMAIN run |-> SumSeq(SubSeq(sizes, 1, k - 1))]
        lanes == [i \in 1 .. count |-> Lane(i - 1)]
        deficit == [lane \in Ranks |->
                      Max2(0, Cardinality({i \in DOMAIN lanes : lanes[i] = lane}) - FreeIn(s.dev_free, lane))]
        plan == IF \A lane \in Ranks : deficit[lane] = 0
                THEN [victims |-> <<>>, remaining |-> deficit]
                ELSE Plan(s, deficit)
        s1 == EvictAll(s, plan.victims)
        got == Alloc(s1.dev_free, lanes)
        \* page i of the run is loaded from this host page
        source == [i \in 1 .. count |->
                     LET k == CHOOSE k \in DOMAIN run : start[k] < i /\ i <= start[k] + sizes[k]
                     IN s1.objects[s1.nodes[run[k]].host].base + (i - start[k] - 1)]
        last == run[Len(run)]
        loaded == [n \in DOMAIN s1.nodes |->
                     IF n \in Range(run)
                     THEN LET k == IndexOf(run, n)
                          IN [s1.nodes[n] EXCEPT !.dev = SubSeq(got.pages, start[k] + 1, start[k] + sizes[k])]
                     ELSE s1.nodes[n]]
    IN IF count = 0 \/ count * P < LoadBackThreshold \/ \E lane \in Ranks : plan.remaining[lane] > 0
       THEN [ok |-> FALSE, s |-> s]
       ELSE [ok |-> TRUE,
             s |-> [s1 EXCEPT
                      !.nodes = LockPath(LockPath(loaded, last, 1), req.node, -1),
                      !.dev_free = got.free,
                      !.dev_content = [p \in Range(got.pages) |->
                                         s1.host_content[source[IndexOf(got.pages, p)]]] @@ @,
                      !.requests[rid].node = last]]

(* Load the L2-only nodes below a matched request's lock back to L1, all or
   nothing: page i of the run goes to lane i mod R, and the owner-lane planner
   frees what the lanes lack. The lock moves to the deepest loaded node. *)
LoadBack(rid) ==
    /\ rid \in DOMAIN requests
    /\ requests[rid].phase = "matched"
    /\ Apply(LoadedBack(State, rid))

-----------------------------------------------------------------------------
(* L3: each rank's disk, addressed by page hash. A page inside an L2 object or
   a reload belongs to rank i mod R, i its 0-based index in it; ranks copy only
   the pages they own. Every L3 step needs an L3 tier (L3 > 0). *)

\* The 0-based indices of the pages rank r owns in a run of n pages.
Owned(r, n) == {i \in 0 .. n - 1 : i % R = r}
OwnedSeq(r, n) == [k \in 1 .. Cardinality(Owned(r, n)) |-> r + (k - 1) * R]

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

RECURSIVE SubmitFrom(_)
SubmitFrom(q) ==
    IF q = <<>> THEN [rest |-> <<>>, node |-> NoNode]
    ELSE IF Spillable(Head(q)) THEN [rest |-> Tail(q), node |-> Head(q)]
    ELSE SubmitFrom(Tail(q))

SpillSubmit ==
    /\ L3 > 0
    /\ spill_queue # <<>>
    /\ Len(spills) < SpillInflight
    /\ LET sub == SubmitFrom(spill_queue)
       IN /\ spill_queue' = sub.rest
          /\ IF sub.node = NoNode THEN UNCHANGED <<nodes, spills>>
             ELSE /\ nodes' = [nodes EXCEPT ![sub.node].pin = @ + 1]
                  /\ spills' = Append(spills, [node |-> sub.node, hashes |-> NodeHashes(nodes, sub.node),
                                               pinned |-> TRUE])
    /\ UNCHANGED <<next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes, requests,
                   write_done, dev_content, host_content, reload_candidates, reloads, spill_gathered,
                   spill_done, reload_done, disk_ok, disk_faults, l3, spill_staged>>

(* Rank r gathers the pages it owns of its next spill out of the shared slab,
   from the run fixed at submit: the node may have been split meanwhile (its
   lower part keeps the object key and the run's end, and stays pinned until
   every rank has gathered), so the run starts Len(op.hashes) before the end. *)
SpillGathered(r) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ spill_gathered[r] < Len(spills)
    /\ LET op == spills[spill_gathered[r] + 1]
           base == objects[op.node].base + objects[op.node].length - Len(op.hashes)
           own == OwnedSeq(r, Len(op.hashes))
       IN spill_staged' = [spill_staged EXCEPT ![r] =
                             Append(@, [k \in DOMAIN own |-> <<op.hashes[own[k] + 1],
                                                               host_content[base + own[k]]>>])]
    /\ spill_gathered' = [spill_gathered EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, host_content, spill_queue, spills,
                   reload_candidates, reloads, spill_done, reload_done, disk_ok, disk_faults, l3>>

\* Rank r's next spill write succeeds: its disk works and has room for the new pages.
SpillWriteOk(r) ==
    LET staged == Head(spill_staged[r])
        new == {k \in DOMAIN staged : staged[k][1] \notin DOMAIN l3[r]}
    IN disk_ok[r] /\ Cardinality(DOMAIN l3[r]) + Cardinality(new) <= L3

\* Rank r writes its oldest gathered spill to its disk, ok or not.
SpillDone(r, ok) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ Len(spill_done[r]) < spill_gathered[r]
    /\ ok = SpillWriteOk(r)
    /\ LET staged == Head(spill_staged[r])
           hs == {staged[k][1] : k \in DOMAIN staged}
       IN l3' = IF ok THEN [l3 EXCEPT ![r] = [h \in hs |-> (CHOOSE p \in Range(staged) : p[1] = h)[2]] @@ @]
                ELSE l3
    /\ spill_staged' = [spill_staged EXCEPT ![r] = Tail(@)]
    /\ spill_done' = [spill_done EXCEPT ![r] = Append(@, ok)]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, host_content, spill_queue, spills,
                   reload_candidates, reloads, spill_gathered, reload_done, disk_ok, disk_faults>>

(* The agreement of spills: the MIN over ranks of the ops gathered releases
   their pins; the MIN of the ops written, and the AND of their ok bits, marks
   durable the nodes whose pages every owner wrote. After a split the node keeps
   only a suffix of what was spilled; its pages' owners are the ranks that wrote
   them only if the offset is a multiple of R (DurableSplit = "reference", as the
   reference does, marks the node whatever the offset). *)
SpillAck ==
    /\ L3 > 0
    /\ spills # <<>>
    /\ LET g == Min({spill_gathered[r] : r \in Ranks})
           d == Min({Len(spill_done[r]) : r \in Ranks})
           unpin == {j \in 1 .. g : spills[j].pinned}
           written(j) ==
               LET op == spills[j]
                   n == op.node
               IN /\ n \in DOMAIN nodes
                  /\ nodes[n].host = n
                  /\ \A r \in Ranks : spill_done[r][j]
                  /\ \/ DurableSplit = "reference"
                     \/ LET hs == NodeHashes(nodes, n)
                            off == Len(op.hashes) - Len(hs)
                        IN off >= 0 /\ off % R = 0 /\ SubSeq(op.hashes, off + 1, Len(op.hashes)) = hs
           durable == {spills[j].node : j \in {j \in 1 .. d : written(j)}}
       IN /\ d > 0 \/ unpin # {}
          /\ nodes' = [n \in DOMAIN nodes |->
                         [nodes[n] EXCEPT !.pin = @ - Cardinality({j \in unpin : spills[j].node = n}),
                                          !.durable = @ \/ n \in durable]]
          /\ spills' = [j \in 1 .. Len(spills) - d |->
                          [spills[j + d] EXCEPT !.pinned = @ /\ j + d \notin unpin]]
          /\ spill_gathered' = [r \in Ranks |-> spill_gathered[r] - d]
          /\ spill_done' = [r \in Ranks |-> SubSeq(spill_done[r], d + 1, Len(spill_done[r]))]
    /\ UNCHANGED <<next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, host_content, spill_queue,
                   reload_candidates, reloads, reload_done, disk_ok, disk_faults, l3, spill_staged>>

(* Reloads. A queued request whose key misses the tree at a node boundary below
   its deepest whole match (the anchor) may be marked, once, as a candidate for
   a reload of the missing suffix. *)

NoTarget == [anchor |-> NoNode, tokens |-> <<>>, hashes |-> <<>>]

ReloadTarget(ns, req) ==
    LET w == WalkKey(ns, req.tokens)
        anchor == IF w.full = <<>> THEN Root ELSE w.full[Len(w.full)]
        tokens == SubSeq(req.tokens, w.covered + 1, Len(req.tokens))
    IN IF w.cut # <<>> \/ w.covered >= Len(req.tokens) THEN NoTarget
       ELSE [anchor |-> anchor, tokens |-> tokens, hashes |-> Chain(Prefix(ns, anchor), tokens)]

ReloadMark(rid) ==
    /\ L3 > 0
    /\ rid \in DOMAIN requests
    /\ requests[rid].phase = "queued"
    /\ ~requests[rid].tried
    /\ LET t == ReloadTarget(nodes, requests[rid])
       IN /\ t.anchor # NoNode
          /\ reload_candidates' = (rid :> t) @@ reload_candidates
    /\ requests' = [requests EXCEPT ![rid].tried = TRUE]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   write_done, dev_content, host_content, spill_queue, spills, reloads,
                   spill_gathered, spill_done, reload_done, disk_ok, disk_faults, l3, spill_staged>>

\* The leading pages of `hs` whose owned hashes rank r holds, and their MIN over ranks.
ClaimOf(s, r, hs) ==
    Max({n \in 0 .. Len(hs) : \A i \in 0 .. n - 1 : i % R # r \/ hs[i + 1] \in DOMAIN s.l3[r]})
Claimable(s, hs) == Min({ClaimOf(s, r, hs) : r \in Ranks})

\* The anchor is still in the tree, the suffix still a clean miss under it, and
\* the anchor's prefix still leads to the suffix's first page hash.
AttachOk(ns, anchor, tokens, first) ==
    /\ anchor \in DOMAIN ns
    /\ ChildWith(ns, anchor, tokens[1]) = NoNode
    /\ Prefix(ns, anchor) \o <<tokens[1]>> = first

ReloadFloor == Max2(1, LoadBackThreshold \div P)

(* Decide candidate rid: claim the pages every rank has (at least the
   load-back floor, and a clean attach); join the in-flight reload of the same
   pages, or reserve an L2 object for a new one (evicting host leaves to fit, as
   Reserve does, and keeping the evictions when it cannot fit). Otherwise only
   the mark is dropped and the request recomputes. *)
ReloadReserved(s, rid) ==
    LET cand == s.reload_candidates[rid]
        s0 == [s EXCEPT !.reload_candidates = Remove(@, {rid})]
        c == Claimable(s, cand.hashes)
        key == cand.hashes[c]
        same == {j \in DOMAIN s.reloads : s.reloads[j].key = key}
        room == HostRoom(s0, c, VictimOrder(s.nodes, HostVictims(s)))
        base == FirstFit(room.s.l2_free, c)
    IN IF c < ReloadFloor \/ ~AttachOk(s.nodes, cand.anchor, cand.tokens, cand.hashes[1])
       THEN [ok |-> TRUE, s |-> s0]
       ELSE IF same # {}
       THEN LET j == CHOOSE j \in same : TRUE
            IN [ok |-> TRUE, s |-> [s0 EXCEPT !.reloads[j].waiters = Append(@, rid)]]
       ELSE IF Len(s.reloads) >= ReloadInflight
       THEN [ok |-> TRUE, s |-> s0]
       \* cannot fit even after evicting the snapshot: the evictions stay
       ELSE IF ~room.ok
       THEN [ok |-> TRUE, s |-> room.s]
       ELSE [ok |-> TRUE,
             s |-> [room.s EXCEPT
                      !.l2_free = @ \ (base .. base + c - 1),
                      !.reloads = Append(@, [key |-> key, anchor |-> cand.anchor,
                                             tokens |-> SubSeq(cand.tokens, 1, c),
                                             hashes |-> SubSeq(cand.hashes, 1, c),
                                             waiters |-> <<rid>>, ttl |-> ReloadTTL,
                                             base |-> base, length |-> c])]]

ReloadReserve(rid) ==
    /\ L3 > 0
    /\ rid \in DOMAIN reload_candidates
    /\ Apply(ReloadReserved(State, rid))

\* Rank r's next reload read succeeds: its disk works and holds every page it owns.
ReloadReadOk(r) ==
    LET op == reloads[Len(reload_done[r]) + 1]
    IN disk_ok[r] /\ \A i \in Owned(r, Len(op.hashes)) : op.hashes[i + 1] \in DOMAIN l3[r]

\* Rank r reads the pages it owns of its next reload from its disk into the object.
ReloadDone(r, ok) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ Len(reload_done[r]) < Len(reloads)
    /\ ok = ReloadReadOk(r)
    /\ LET op == reloads[Len(reload_done[r]) + 1]
       IN host_content' = IF ok THEN [h \in {op.base + i : i \in Owned(r, Len(op.hashes))} |->
                                        l3[r][op.hashes[h - op.base + 1]]] @@ host_content
                          ELSE host_content
    /\ reload_done' = [reload_done EXCEPT ![r] = Append(@, ok)]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, spill_queue, spills, reload_candidates,
                   reloads, spill_gathered, spill_done, disk_ok, disk_faults, l3, spill_staged>>

(* The agreement of reloads: once every rank has read the head reload, the AND
   of the ok bits decides. If it still holds requests, every rank read ok and
   the anchor still takes the suffix, one L2-only, durable node is inserted
   under the anchor; otherwise the reservation is freed. Either way its waiters
   are released (they match again). *)
ReloadAdmit ==
    /\ L3 > 0
    /\ reloads # <<>>
    /\ \A r \in Ranks : reload_done[r] # <<>>
    /\ LET op == Head(reloads)
           pages == op.base .. op.base + op.length - 1
       IN IF /\ op.waiters # <<>>
             /\ \A r \in Ranks : reload_done[r][1]
             /\ AttachOk(nodes, op.anchor, op.tokens, op.hashes[1])
          THEN /\ nodes' = (next_id :> [parent |-> op.anchor, key |-> op.tokens, dev |-> <<>>,
                                        host |-> next_id, durable |-> TRUE, lock |-> 0, pin |-> 0,
                                        hits |-> 0, touched |-> clock + 1]) @@ nodes
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
    /\ UNCHANGED <<next_rid, dev_free, pending, writes, requests, write_done, dev_content,
                   spill_queue, spills, reload_candidates, spill_gathered, spill_done, disk_ok,
                   disk_faults, l3, spill_staged>>

\* One tick of the reload clock: the waiters of a reload whose ttl runs out are
\* released to recompute; its reservation stays until it is admitted or aborted.
ReloadExpire ==
    /\ L3 > 0
    /\ \E j \in DOMAIN reloads : reloads[j].waiters # <<>>
    /\ reloads' = [j \in DOMAIN reloads |->
                     LET t == Max2(0, reloads[j].ttl - 1)
                     IN [reloads[j] EXCEPT !.ttl = t, !.waiters = IF t = 0 THEN <<>> ELSE @]]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, host_content, spill_queue, spills,
                   reload_candidates, spill_gathered, spill_done, reload_done, disk_ok,
                   disk_faults, l3, spill_staged>>

(* Faults: a rank's disk starts or stops failing. While it fails, that rank's
   spill writes and reload reads are not ok. *)
DiskFail(r) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ disk_ok[r]
    /\ MaxDiskFaults = 0 \/ disk_faults < MaxDiskFaults
    /\ disk_ok' = [disk_ok EXCEPT ![r] = FALSE]
    /\ disk_faults' = disk_faults + 1
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, host_content, spill_queue, spills,
                   reload_candidates, reloads, spill_gathered, spill_done, reload_done, l3,
                   spill_staged>>

DiskRecover(r) ==
    /\ L3 > 0
    /\ r \in Ranks
    /\ ~disk_ok[r]
    /\ disk_ok' = [disk_ok EXCEPT ![r] = TRUE]
    /\ UNCHANGED <<nodes, next_id, clock, next_rid, dev_free, l2_free, objects, pending, writes,
                   requests, write_done, dev_content, host_content, spill_queue, spills,
                   reload_candidates, reloads, spill_gathered, spill_done, reload_done,
                   disk_faults, l3, spill_staged>>

-----------------------------------------------------------------------------
(* Next quantifies over id spaces: request ids are bounded by the arrivals,
   split offsets by the longest prompt; node ids are unbounded in the spec and a
   model bounds them (NodeIds). Constant bounds also let TLC label each step with
   its transition's name. *)
RequestIds == IF MaxRequests > 0 THEN 0 .. MaxRequests - 1 ELSE Nat
NodeIds == Nat \ {Root}
SplitOffsets == 1 .. (IF Prompts = {} THEN 0 ELSE Max({Len(p.pages) : p \in Prompts})) - 1

Next ==
    \/ \E p \in Prompts : Arrive(next_rid, p.pages, p.out_pages)
    \/ \E rid \in RequestIds : Match(rid)
    \/ \E rid \in RequestIds : Insert(rid)
    \/ \E rid \in RequestIds : Finish(rid)
    \/ \E rid \in RequestIds : Abort(rid)
    \/ \E n \in NodeIds, at \in SplitOffsets : Split(n, at)
    \/ \E n \in NodeIds, fits \in BOOLEAN : Reserve(n, fits)
    \/ \E r \in Ranks : WriteDone(r)
    \/ Commit
    \/ \E n \in NodeIds : Rollback(n)
    \/ \E n \in NodeIds : EvictDevice(n)
    \/ \E n \in NodeIds : EvictHost(n)
    \/ \E rid \in RequestIds : LoadBack(rid)
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

(* The rank steps are fair: a rank with a write to finish finishes it, and what
   every rank finished is committed; a rank with a reload to read reads it, and
   what every rank read is admitted or aborted. The reload clock is fair too:
   while a reload holds a request, it ticks (ReloadExpire), which alone
   releases every held request within ReloadTTL ticks. Nothing else is fair:
   requests, evictions, spills and faults may stop at any point. *)
Fairness == /\ \A r \in Ranks : WF_vars(WriteDone(r))
            /\ WF_vars(Commit)
            /\ \A r \in Ranks : WF_vars(\E ok \in BOOLEAN : ReloadDone(r, ok))
            /\ WF_vars(ReloadAdmit)
            /\ WF_vars(ReloadExpire)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Invariants (MODEL.md section 6), named as kvsm/invariants.py names them. *)

RECURSIVE ReachesRoot(_, _)
ReachesRoot(n, k) == n = Root \/ (k > 0 /\ n \in DOMAIN nodes /\ ReachesRoot(nodes[n].parent, k - 1))

\* 1. Parent links form a tree rooted at 0; siblings differ in their first page;
\*    keys are non-empty (whole pages).
Tree ==
    /\ nodes[Root].parent = NoParent /\ nodes[Root].key = <<>>
    /\ nodes[Root].dev = <<>> /\ nodes[Root].host = NoObject
    /\ \A n \in DOMAIN nodes \ {Root} :
          /\ nodes[n].key # <<>>
          /\ nodes[n].parent \in DOMAIN nodes
          /\ ReachesRoot(n, Cardinality(DOMAIN nodes))
    /\ \A a, b \in DOMAIN nodes \ {Root} :
          (a # b /\ nodes[a].parent = nodes[b].parent /\ nodes[a].key # <<>> /\ nodes[b].key # <<>>)
             => nodes[a].key[1] # nodes[b].key[1]

\* 2. Every node is on L1 or backed by a committed object; a node on L1 has its
\*    parent on L1 (or is a child of the root).
Residency ==
    \A n \in DOMAIN nodes \ {Root} :
        LET nd == nodes[n] IN
        /\ nd.dev # <<>> => Len(nd.dev) = Len(nd.key)
        /\ nd.dev = <<>> => nd.host # NoObject /\ nd.host \in DOMAIN objects /\ objects[nd.host].committed
        /\ (nd.dev # <<>> /\ nd.parent # Root) => nodes[nd.parent].dev # <<>>

\* 3. `lock` counts the holders (requests whose lock covers the node, and its
\*    pending backup); a locked node is on L1.
Locks ==
    LET holders(n) == Cardinality({q \in DOMAIN requests :
                                     requests[q].phase # "queued" /\ n \in PathToRoot(nodes, requests[q].node)})
                      + Bit(n \in pending)
    IN /\ \A q \in DOMAIN requests :
              /\ requests[q].phase = "queued" => requests[q].node = Root
              /\ requests[q].node \in DOMAIN nodes
              /\ (requests[q].phase = "matched" /\ requests[q].node # Root) => nodes[requests[q].node].dev # <<>>
       /\ \A n \in DOMAIN nodes : nodes[n].lock = holders(n)
       /\ \A n \in DOMAIN nodes \ {Root} : nodes[n].lock > 0 => nodes[n].dev # <<>>

\* 4. A pending backup is in `writes` once, its node locked, on L1, unbacked, not
\*    evictable and not split (its object still has the node's length).
Pending ==
    /\ Len(writes) = Cardinality(Range(writes))
    /\ Range(writes) = pending
    /\ \A n \in pending :
          /\ n \in DOMAIN nodes
          /\ nodes[n].lock > 0
          /\ nodes[n].dev # <<>>
          /\ nodes[n].host = NoObject
          /\ ~DevEvictable(State, n)
          /\ n \in DOMAIN objects
          /\ ~objects[n].committed
          /\ objects[n].length = Len(nodes[n].key)
    /\ \A r \in Ranks : write_done[r] \in 0 .. Len(writes)

\* 5. The device pages of the nodes, of the requests and the free set partition
\*    the device pool: no leak, no double use.
DevicePages ==
    /\ UNION {Range(nodes[n].dev) : n \in DOMAIN nodes}
         \cup UNION {Range(requests[q].pages) : q \in DOMAIN requests} \cup dev_free = DevicePool
    /\ SumFn([n \in DOMAIN nodes |-> Len(nodes[n].dev)])
         + SumFn([q \in DOMAIN requests |-> Len(requests[q].pages)])
         + Cardinality(dev_free) = Cardinality(DevicePool)

\* 6. The object ranges, the reloads' reservations and the free set partition
\*    the host pool; each object belongs to exactly one committed node or pending
\*    backup (a reload's reservation is part of the reload itself).
ReloadPages(op) == op.base .. op.base + op.length - 1

HostPages ==
    /\ \A k \in DOMAIN objects : ObjectPages(objects[k]) \subseteq HostPool
    /\ \A j \in DOMAIN reloads : ReloadPages(reloads[j]) \subseteq HostPool
    /\ UNION {ObjectPages(objects[k]) : k \in DOMAIN objects}
         \cup UNION {ReloadPages(reloads[j]) : j \in DOMAIN reloads} \cup l2_free = HostPool
    /\ SumFn([k \in DOMAIN objects |-> objects[k].length])
         + SumSeq([j \in DOMAIN reloads |-> reloads[j].length]) + Cardinality(l2_free) = L2
    /\ \A k \in DOMAIN objects :
          IF objects[k].committed
          THEN /\ objects[k].owner \in DOMAIN nodes
               /\ nodes[objects[k].owner].host = k
               /\ objects[k].length = Len(nodes[objects[k].owner].key)
          ELSE k \in pending
    /\ \A n \in DOMAIN nodes :
          (nodes[n].host # NoObject /\ nodes[n].host \in DOMAIN objects) => objects[nodes[n].host].owner = n

\* 7. Every page on L1, every page of a committed object and every L3 entry
\*    (and every page staged for a spill) holds the KV of the prefix it claims;
\*    free device pages are poisoned.
Content ==
    /\ \A n \in DOMAIN nodes \ {Root} :
          LET pre == Prefix(nodes, n)
              above == Len(pre) - Len(nodes[n].key)
              h == nodes[n].host
          IN /\ \A i \in DOMAIN nodes[n].dev : dev_content[nodes[n].dev[i]] = SubSeq(pre, 1, above + i)
             /\ (h # NoObject /\ h \in DOMAIN objects) =>
                   \A i \in 1 .. Min2(objects[h].length, Len(nodes[n].key)) :
                       host_content[objects[h].base + i - 1] = SubSeq(pre, 1, above + i)
    /\ \A p \in dev_free : dev_content[p] = NoContent
    /\ \A r \in Ranks : \A h \in DOMAIN l3[r] : l3[r][h] = h
    /\ \A r \in Ranks : \A j \in DOMAIN spill_staged[r] :
          \A k \in DOMAIN spill_staged[r][j] : spill_staged[r][j][k][2] = spill_staged[r][j][k][1]

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
\*     node's pin counts the spills that pin it; each rank's spill and reload
\*     progress is within what is in flight; no disk holds more than L3 pages.
Counts ==
    /\ \A n \in DOMAIN nodes : n < next_id /\ nodes[n].touched <= clock
    /\ \A q \in DOMAIN requests : q < next_rid
    /\ \A n \in DOMAIN nodes : nodes[n].pin = Cardinality({j \in DOMAIN spills : spills[j].node = n /\ spills[j].pinned})
    /\ \A r \in Ranks :
          /\ Len(spill_done[r]) <= spill_gathered[r]
          /\ spill_gathered[r] <= Len(spills)
          /\ Len(spill_staged[r]) = spill_gathered[r] - Len(spill_done[r])
          /\ Len(reload_done[r]) <= Len(reloads)
          /\ Cardinality(DOMAIN l3[r]) <= L3

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
