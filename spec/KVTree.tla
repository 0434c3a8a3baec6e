-------------------------------- MODULE KVTree --------------------------------
(***************************************************************************)
(* The operators KVCache's actions are built from: walking a key through   *)
(* the radix tree and splitting a node, the victim orders, allocating and  *)
(* freeing pages, the owner-lane planner, and what L3 claims and attaches. *)
(*                                                                         *)
(* None of them reads a variable. Those that change the cache take and     *)
(* return a state record `s` whose fields are KVCache's variables (the     *)
(* record KVCache calls State); those that only look take the node map     *)
(* `ns` (KVCache's `nodes`). KVCache extends this module; the constants    *)
(* below are the ones these operators depend on, and KVCache's ASSUME      *)
(* states what they must be. An action computes its effect with these      *)
(* operators because TLC caches the definitions of a LET inside an         *)
(* operator, where it re-evaluates a LET written in an action at every     *)
(* use. A loop that may run for hundreds of rounds (victims, evictions) is *)
(* a recursive function local to its operator, not a RECURSIVE operator:  *)
(* TLC evaluates each call of an operator in its caller's context, so a    *)
(* chain of n calls makes every name it looks up cost n, where a function *)
(* application starts from the function's own context. TLC also evaluates *)
(* a function [x \in S |-> e] anew at every application, and a set        *)
(* {x \in S : p} anew at every use; TLCEval(v), which is v (module TLC),   *)
(* makes it compute such a value once, where a step applies it many times *)
(* (a planner's scores, the lowest free pages of each lane).              *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    R,              \* ranks: device page p lives in the lane of rank p mod R
    L2,             \* pages in the shared host pool
    Policy,         \* "write_through" or "write_back"
    L3,             \* pages each rank's disk holds; 0 = no L3 tier
    SpillQueueCap,  \* committed objects queued for a spill at most
    UnbackedEvict,  \* "reference": an unbacked leaf with L2-only children is a device victim (orphans them)
    DurableSplit,   \* "reference": a split's lower part keeps durable whatever the offset
    VictimOrder,    \* "slru": nodes hit twice or more are evicted last; "lru": by last access only
    CarryHostHit,   \* TRUE: Match records its host hit (pinned) for a later LoadBack to load
    WriteBackEvict, \* "sync": under write_back a load-back writes its unbacked device victims back
                    \* inside its step (the reference); "locked": they are no victims
    Bug             \* an injected defect (docs/defects.md), or "none"

Root == 0
NoParent == -1      \* the root's parent
Gone == -2          \* a husk's parent (UnbackedEvict = "reference": EvictDeviceNode)
NoObject == -1      \* `host` of a node with no committed L2 copy
NoNode == -1
NoContent == <<>>   \* a poisoned page
Ranks == 0 .. R - 1
WriteThrough == Policy = "write_through"
\* A load-back writes its unbacked device victims back synchronously, in its own step.
SyncWriteBack == Policy = "write_back" /\ WriteBackEvict \in {"sync", "deferred", "deferred_fixed"}

\* Device page p belongs to the lane of rank p mod R.
Lane(p) == p % R

(* Injected defects (docs/defects.md). Under these a rank decides a replicated
   step (its victims, its host room, its L3 claim) from its own view: an
   operator that takes a view `v` gives rank v's decision, or with NoView the
   replicated one that every rank takes alike when none of them is injected. *)
RankViewBugs == {"local_host_alloc", "wallclock_tiebreak", "l3_no_min"}
NoView == -1

-----------------------------------------------------------------------------
(* Values *)

Min(S) == CHOOSE x \in S : \A y \in S : x <= y
Max(S) == CHOOSE x \in S : \A y \in S : x >= y
Max2(a, b) == IF a >= b THEN a ELSE b
Min2(a, b) == IF a <= b THEN a ELSE b
Range(s) == {s[i] : i \in DOMAIN s}
IndexOf(s, x) == CHOOSE i \in DOMAIN s : s[i] = x
Remove(f, S) == [x \in DOMAIN f \ S |-> f[x]]
EmptyFn == [x \in {} |-> 0]
\* The function that maps keys[i] to vals[i] (keys distinct, vals at least as long):
\* one merge per key, where [k \in Range(keys) |-> vals[IndexOf(keys, k)]] searches
\* for every key's index.
Zip(keys, vals) ==
    LET F[i \in 1 .. Len(keys) + 1] == IF i > Len(keys) THEN EmptyFn ELSE (keys[i] :> vals[i]) @@ F[i + 1]
    IN F[1]
Bit(b) == IF b THEN 1 ELSE 0

\* The sequence s without its element x (s holds x at most once).
Without(s, x) == IF x \in Range(s) THEN LET j == IndexOf(s, x) IN SubSeq(s, 1, j - 1) \o SubSeq(s, j + 1, Len(s))
                 ELSE s

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

(* The x of S whose key[x] is less (LexLess) than every other's, when the keys
   are distinct sequences of one length: the least first component, then among
   those the least second one, and so on. This equals
   CHOOSE x \in S : \A y \in S \ {x} : LexLess(key[x], key[y]) (undefined alike
   when S is empty) but costs |S| per component where that CHOOSE costs |S|^2. *)
RECURSIVE LeastFrom(_, _, _)
LeastFrom(key, S, i) ==
    IF Cardinality(S) = 1 THEN CHOOSE x \in S : TRUE
    ELSE LET m == Min({key[x][i] : x \in S})
         IN LeastFrom(key, {x \in S : key[x][i] = m}, i + 1)

LexLeast(key, S) == LeastFrom(TLCEval(key), TLCEval(S), 1)

\* The absolute positions (page k of a request counts from the root) of n pages from `start`.
Positions(start, n) == [j \in 1 .. n |-> start + j - 1]

-----------------------------------------------------------------------------
(* The tree *)

Children(ns, n) == {c \in DOMAIN ns : ns[c].parent = n}
ChildOnL1(ns, n) == \E c \in Children(ns, n) : ns[c].dev # <<>>

\* The nodes with a child, and those with a child on L1: a test against them takes
\* one pass over the tree for all nodes, where Children takes one per node.
Parents(ns) == {ns[c].parent : c \in DOMAIN ns}
ParentsOnL1(ns) == {ns[c].parent : c \in {c \in DOMAIN ns : ns[c].dev # <<>>}}

\* n and its ancestors, the root excluded: the nodes a lock on n covers.
RECURSIVE PathToRoot(_, _)
PathToRoot(ns, n) == IF n = Root THEN {} ELSE {n} \cup PathToRoot(ns, ns[n].parent)

\* The page symbols from the root through n.
RECURSIVE Prefix(_, _)
Prefix(ns, n) == IF n = Root THEN <<>> ELSE IF ns[n].parent = Gone THEN ns[n].key ELSE Prefix(ns, ns[n].parent) \o ns[n].key

(* Namespaces (tenants, LoRA adapters). A node and a request carry one (`ns`);
   the content of a page of namespace k > 0 is its prefix after the virtual
   symbol -k (NsPre), that of namespace 0 the prefix alone, so namespace 0 is the
   cache without namespaces. A walk from the root takes only children of its
   namespace, and every node's children are of its own. *)
NsPre(k) == IF k = 0 THEN <<>> ELSE <<-k>>
(* What an L3 page hash covers (kvsm's `l3_key`): "namespace", the content,
   namespace included; "tokens", the token prefix alone (the reference's content
   hash over token ids). A definition a model overrides in its cfg, as L2Alloc. *)
L3Key == "namespace"
ASSUME L3Key \in {"namespace", "tokens"}
\* Keys cover the tokens alone: L3Key = "tokens", or the defect l3_key_no_ns (the
\* namespace dropped from the L3 key whatever L3Key says).
L3ByTokens == L3Key = "tokens" \/ Bug = "l3_key_no_ns"
\* What an L3 key of namespace k's pages starts with: the namespace, or nothing
\* when keys cover the tokens alone.
KeyPre(k) == IF L3ByTokens THEN <<>> ELSE NsPre(k)
\* The L3 key that names content c (its prefix without the namespace under "tokens").
KeyOf(c) == IF L3ByTokens /\ c # <<>> /\ c[1] < 0 THEN Tail(c) ELSE c

\* The page hashes (L3 keys) of n's pages: the prefix through each, after KeyPre.
NodeHashes(ns, n) ==
    LET pre == Prefix(ns, n)
        above == Len(pre) - Len(ns[n].key)
    IN [i \in 1 .. Len(ns[n].key) |-> KeyPre(ns[n].ns) \o SubSeq(pre, 1, above + i)]

\* The hashes of the pages `tokens` that follow the prefix `base`.
Chain(base, tokens) == [i \in 1 .. Len(tokens) |-> base \o SubSeq(tokens, 1, i)]

(* The tenant-isolation defects that let a walk leave its namespace (kvsm's
   `other_child`): where n has no child of namespace k for sym, under
   lora_salt_collision the child of the namespace whose tree key is k's (odd 2j-1,
   LoRA adapter j, and even 2j, cache salt j, joined without a delimiter: both
   "j"), under host_key_no_ns a host-only child (off L1, backed) of any namespace
   (the host tier looked up by tokens alone), the least namespace first. *)
SaltKey(k) == (k + 1) \div 2
OtherChildren(ns, n, sym, k) ==
    IF Bug = "lora_salt_collision"
    THEN {c \in Children(ns, n) : ns[c].key[1] = sym /\ ns[c].ns # k /\ SaltKey(ns[c].ns) = SaltKey(k)}
    ELSE IF Bug = "host_key_no_ns"
    THEN {c \in Children(ns, n) : ns[c].key[1] = sym /\ ns[c].ns # k /\ ns[c].dev = <<>> /\ ns[c].host # NoObject}
    ELSE {}

ChildWith(ns, n, sym, k) ==
    LET cs == {c \in Children(ns, n) : ns[c].key[1] = sym /\ ns[c].ns = k}
    IN IF cs # {} THEN CHOOSE c \in cs : TRUE
       ELSE IF Bug \notin {"lora_salt_collision", "host_key_no_ns"} THEN NoNode
       ELSE LET os == OtherChildren(ns, n, sym, k)
            IN IF os = {} THEN NoNode ELSE CHOOSE c \in os : \A d \in os : ns[c].ns <= ns[d].ns

\* The least j >= i where a and b differ after j elements (or one of them ends).
CommonLen(a, b, i) ==
    LET m == Min2(Len(a), Len(b))
    IN Min({j \in i .. m - 1 : a[j + 1] # b[j + 1]} \cup {Max2(i, m)})

(* Where a key leads: the nodes it covers whole (root to leaf), the pages they
   cover, and the node it diverges inside with the pages in common (`cut`,
   <<>> when none). A key that ends inside a node diverges there too. *)
RECURSIVE WalkFrom(_, _, _, _, _, _)
WalkFrom(ns, tokens, cur, i, full, k) ==
    LET c == IF i < Len(tokens) THEN ChildWith(ns, cur, tokens[i + 1], k) ELSE NoNode
    IN IF c = NoNode THEN [full |-> full, covered |-> i, cut |-> <<>>]
       ELSE LET n == CommonLen(ns[c].key, SubSeq(tokens, i + 1, Len(tokens)), 0)
            IN IF n = Len(ns[c].key) THEN WalkFrom(ns, tokens, c, i + n, Append(full, c), k)
               ELSE [full |-> full, covered |-> i, cut |-> <<c, n>>]

\* (in namespace k)
WalkKey(ns, tokens, k) == WalkFrom(ns, tokens, Root, 0, <<>>, k)

\* How many nodes of `path`, from its head, are on L1.
RECURSIVE OnL1Run(_, _)
OnL1Run(ns, path) ==
    IF path = <<>> \/ ns[Head(path)].dev = <<>> THEN 0 ELSE 1 + OnL1Run(ns, Tail(path))

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

\* A node that cannot be split: its backup is pending (the reference splits a node
\* an in-flight spill pins). Under split_pending the split does not look for a
\* backup in flight.
Unsplittable(s, n) == n \in s.pending /\ Bug # "split_pending"

(* How the host pool hands out an object's pages (kvsm's `l2_alloc`): "run", one
   contiguous run, first fit (an object is [base, length, committed, owner]);
   "pages", any free pages, the lowest-numbered first (SGLang's host allocator):
   the object also carries them in its order, `pages`. A definition a model
   overrides in its cfg (`L2Alloc = "pages"`), as StalePrune. *)
L2Alloc == "run"
ASSUME L2Alloc \in {"run", "pages"}
\* A load-back short of device pages evicts for the shortfall, or ("whole") for its
\* whole size (kvsm's `load_back_evict`, SGLang's load_back); overridden as L2Alloc.
LoadBackEvict == "shortfall"
ASSUME LoadBackEvict \in {"shortfall", "whole"}

\* The host page of object o at index i (1-based), and all of them.
ObjPage(o, i) == IF L2Alloc = "pages" THEN o.pages[i] ELSE o.base + i - 1
ObjectPages(o) == IF L2Alloc = "pages" THEN Range(o.pages) ELSE o.base .. o.base + o.length - 1

\* Its `len` pages from index `from` (1-based), owned by `owner` (a split's part).
ObjSlice(o, from, len, owner) ==
    IF L2Alloc = "pages"
    THEN [o EXCEPT !.base = o.pages[from], !.length = len, !.owner = owner,
                   !.pages = SubSeq(o.pages, from, from + len - 1)]
    ELSE [o EXCEPT !.base = o.base + from - 1, !.length = len, !.owner = owner]

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
                  hits |-> nd.hits, touched |-> nd.touched, ns |-> nd.ns]
        lower == [nd EXCEPT !.parent = u, !.key = SubSeq(nd.key, at + 1, Len(nd.key)),
                            !.dev = IF nd.dev = <<>> THEN <<>> ELSE SubSeq(nd.dev, at + 1, Len(nd.dev)),
                            !.durable = nd.durable /\ (DurableSplit = "reference" \/ at % R = 0)]
        objs == IF nd.host = NoObject THEN s.objects
                ELSE LET o == s.objects[nd.host]
                     IN (u :> ObjSlice(o, 1, at, u))
                        @@ [s.objects EXCEPT ![nd.host] = ObjSlice(o, at + 1, o.length - at, o.owner)]
    IN [s EXCEPT !.nodes = (u :> upper) @@ [s.nodes EXCEPT ![n] = lower],
                 !.objects = objs,
                 !.next_id = u + 1,
                 !.spill_queue = IF nd.host = NoObject THEN @ ELSE Enqueue(@, <<u>>)]

(* A match covers a prompt but its last page: the reference matches at most
   input_len - 1 tokens, floored to a page, which is one page short of the
   prompt's pages whatever its sub-page tail. *)
MatchKey(tokens) == SubSeq(tokens, 1, Len(tokens) - 1)

(* Where a request's key meets the tree, as Insert takes it: the walk,
   whether the node the key diverges inside is split (it is unless it is
   unsplittable, and then the request stops above it), the state after that
   split, and the path of whole nodes down to where the key leaves the tree. *)
KeyPath(s, tokens, k) ==
    LET w == WalkKey(s.nodes, tokens, k)
        split == w.cut # <<>> /\ ~Unsplittable(s, w.cut[1])
    IN [walk |-> w,
        stop |-> w.cut # <<>> /\ ~split,
        split |-> split,
        s |-> IF split THEN SplitNode(s, w.cut[1], w.cut[2]) ELSE s,
        path |-> IF split THEN Append(w.full, s.next_id) ELSE w.full,
        covered |-> IF split THEN w.covered + w.cut[2] ELSE w.covered]

-----------------------------------------------------------------------------
(* Victims, identical on every rank: ascending (hits >= 2, touched, id) under
   VictimOrder = "slru", (0, touched, id) under "lru" (the hit count unused). *)

Protected(ns, n) == Bit(VictimOrder = "slru" /\ ns[n].hits >= 2)

VictimKey(ns, n) == <<Protected(ns, n), ns[n].touched, n>>

(* The order rank v decides by. Under wallclock_tiebreak a rank stamps an access
   with its own wall clock, which ticks once every two logical accesses at a phase
   of its own (rank v reads access t as (t + v) div 2): two accesses that share a
   tick tie there and fall to the node id, while on a rank whose tick falls
   between them they are ordered by time. *)
VictimKeyAs(ns, n, v) ==
    IF Bug = "wallclock_tiebreak" /\ v # NoView
    THEN <<Protected(ns, n), (ns[n].touched + v) \div 2, n>>
    ELSE VictimKey(ns, n)

\* The n of S whose key is less than every other's (the keys end with the id: distinct).
FirstVictimAs(ns, S, v) == LexLeast([n \in S |-> VictimKeyAs(ns, n, v)], S)

FirstVictim(ns, S) == FirstVictimAs(ns, S, NoView)

\* Each victim of S with its key in rank v's order.
VictimKeys(ns, S, v) == [n \in S |-> VictimKeyAs(ns, n, v)]

(* Whether something holds node n on L1: a lock (its requests, its pending
   backup) or its backup in flight. Under evict_pending the victim test does not
   see the backup in flight: neither that the node is pending nor the lock its
   backup holds on it (`bug` is the defect the test is written with). *)
HeldOnL1(s, n, bug) ==
    IF bug = "evict_pending" /\ n \in s.pending THEN s.nodes[n].lock > 1
    ELSE s.nodes[n].lock # 0 \/ n \in s.pending

(* Evictable from L1: on L1, unlocked, no pending backup, no child on L1, and
   either backed (it keeps its host copy) or, under write_through, unbacked with
   no children at all (it is deleted; one with host-only children would orphan
   them, which the reference does: UnbackedEvict = "reference"). Under
   write_back an unbacked leaf is written back first. *)
(* (`parents` and `parentsOnL1` are Parents(s.nodes) and ParentsOnL1(s.nodes):
   given, so that DevVictims computes them once for all nodes.) *)
DevEvictableAmong(s, n, bug, parents, parentsOnL1) ==
    LET nd == s.nodes[n]
    IN /\ n # Root
       /\ nd.dev # <<>>
       /\ ~HeldOnL1(s, n, bug)
       /\ n \notin parentsOnL1
       /\ nd.host = NoObject => WriteThrough /\ (UnbackedEvict = "reference" \/ n \notin parents)

DevEvictableUnder(s, n, bug) == DevEvictableAmong(s, n, bug, Parents(s.nodes), ParentsOnL1(s.nodes))

DevEvictable(s, n) == DevEvictableUnder(s, n, Bug)

\* Evictable from L2: evicted from L1, backed, no children, unlocked, not pinned
\* by a spill.
\* (`parents` is Parents(s.nodes), given as above.)
HostEvictableAmong(s, n, parents) ==
    LET nd == s.nodes[n]
    IN /\ n # Root
       /\ nd.dev = <<>>
       /\ nd.host # NoObject
       /\ n \notin parents
       /\ nd.lock = 0
       /\ nd.pin = 0

HostEvictable(s, n) == HostEvictableAmong(s, n, Parents(s.nodes))

DevVictims(s) ==
    LET parents == Parents(s.nodes)
        parentsOnL1 == ParentsOnL1(s.nodes)
    IN {n \in DOMAIN s.nodes : DevEvictableAmong(s, n, Bug, parents, parentsOnL1)}

HostVictims(s) ==
    LET parents == Parents(s.nodes)
    IN {n \in DOMAIN s.nodes : HostEvictableAmong(s, n, parents)}

\* The unbacked device leaves a synchronous write-back may take: on L1, unlocked, no
\* pending backup, no child on L1.
UnbackedLeaves(s) ==
    LET parentsOnL1 == ParentsOnL1(s.nodes)
    IN {n \in DOMAIN s.nodes \ {Root} : s.nodes[n].dev # <<>> /\ s.nodes[n].host = NoObject
                                         /\ ~HeldOnL1(s, n, Bug) /\ n \notin parentsOnL1}

\* Under SyncWriteBack, those the planner may take too (they are written back first).
SyncVictims(s) == IF ~SyncWriteBack THEN {} ELSE UnbackedLeaves(s)

-----------------------------------------------------------------------------
(* Pages *)

FreeIn(free, lane) == Cardinality({p \in free : Lane(p) = lane})

\* How many entries of `lanes` name each lane.
LaneNeed(lanes) == TLCEval([lane \in Ranks |-> Cardinality({i \in DOMAIN lanes : lanes[i] = lane})])

(* The n lowest pages of `free` among a, a + R, a + 2R, ..., b, ascending (fewer
   when there are fewer): halving the range keeps the recursion shallow, and the
   upper half is looked at only when the lower one has fewer than n. *)
RECURSIVE LowestIn(_, _, _, _)
LowestIn(free, a, b, n) ==
    IF n = 0 \/ a > b THEN <<>>
    ELSE IF a = b THEN IF a \in free THEN <<a>> ELSE <<>>
    ELSE LET mid == a + ((b - a) \div (2 * R)) * R
             low == LowestIn(free, a, mid, n)
         IN IF Len(low) = n THEN low ELSE low \o LowestIn(free, mid + R, b, n - Len(low))

(* The n lowest pages of `free` from a on in steps of R, ascending, when `left`
   of them are free (fewer when there are fewer): LowestIn over ranges of w, 2w,
   4w, ... pages, which stops once it has n. *)
RECURSIVE LowestFrom(_, _, _, _, _)
LowestFrom(free, a, w, n, left) ==
    IF n = 0 \/ left = 0 THEN <<>>
    ELSE LET got == LowestIn(free, a, a + (w - 1) * R, n)
         IN got \o LowestFrom(free, a + w * R, 2 * w, n - Len(got), left - Len(got))

\* The n lowest free pages of a lane, ascending (all of them when it has fewer).
LowestFree(free, lane, n) ==
    LET F == {q \in free : Lane(q) = lane}
    IN IF n = 0 \/ F = {} THEN <<>> ELSE LowestFrom(free, Min(F), 1, n, Cardinality(F))

(* Allocate one device page per entry of `lanes`, each the lowest free page of
   its lane: entry i takes the k-th lowest free page of its lane when it is the
   k-th entry naming that lane. (The same as taking, entry after entry, the
   lowest page of the lane still free, without a pass over the pool per page.)
   One pass over the entries numbers each among those of its lane (`kth`) and
   appends its page, so that each entry costs the same whatever its index. *)
Alloc(free, lanes) ==
    LET need == LaneNeed(lanes)
        lowest == TLCEval([lane \in Ranks |-> LowestFree(free, lane, need[lane])])
        walk[i \in 0 .. Len(lanes)] ==
            IF i = 0 THEN [kth |-> [lane \in Ranks |-> 0], pages |-> <<>>]
            ELSE LET w == walk[i - 1]
                     k == w.kth[lanes[i]] + 1
                 IN [kth |-> [w.kth EXCEPT ![lanes[i]] = k], pages |-> Append(w.pages, lowest[lanes[i]][k])]
        pages == walk[Len(lanes)].pages
    IN [pages |-> pages, free |-> free \ Range(pages)]

\* (f @@ g is f where f is defined, else g: it overwrites the few pages a step touches.)
FreeDev(s, pages) ==
    [s EXCEPT !.dev_free = @ \cup Range(pages),
              !.dev_content = [p \in Range(pages) |-> NoContent] @@ @]

(* First fit: the lowest base of a free run of `len` host pages,
   {b \in 0 .. L2 - len : b .. b + len - 1 \subseteq free}. For len > 0 a base
   is a free page, and the lowest one is 0 or has no free page just below it (a
   run from b - 1 would be lower): only those are tried, each up to its run's
   end, rather than every base of the pool. *)
RunStarts(free) == {b \in free : b = 0 \/ b - 1 \notin free}
RunAt(free, b, len) == b \in 0 .. L2 - len /\ b .. b + len - 1 \subseteq free
HasRun(free, len) ==
    IF len < 1 THEN 0 .. L2 - len # {}
    ELSE \E b \in RunStarts(free) : RunAt(free, b, len)
FirstFit(free, len) ==
    IF len < 1 THEN Min(0 .. L2 - len)
    ELSE Min({b \in RunStarts(free) : RunAt(free, b, len)})

\* Whether an object of `len` pages fits the free host pages `free`.
HasRoom(free, len) == IF L2Alloc = "pages" THEN Cardinality(free) >= len ELSE HasRun(free, len)

\* The lowest k pages of `free`, in order.
RECURSIVE Lowest(_, _)
Lowest(free, k) == IF k = 0 THEN <<>> ELSE <<Min(free)>> \o Lowest(free \ {Min(free)}, k - 1)

\* The host pages of a new object of `len` pages, in its order.
HostAlloc(free, len) ==
    IF L2Alloc = "pages" THEN Lowest(free, len)
    ELSE LET b == FirstFit(free, len) IN [i \in 1 .. len |-> b + i - 1]

\* An object on host pages `pages` (a sequence, in its order).
NewObject(pages, committed, owner) ==
    IF L2Alloc = "pages"
    THEN [base |-> pages[1], length |-> Len(pages), committed |-> committed, owner |-> owner, pages |-> pages]
    ELSE [base |-> pages[1], length |-> Len(pages), committed |-> committed, owner |-> owner]


\* The host pages a reload has reserved (its object until it is admitted).
ReloadPages(op) == op.base .. op.base + op.length - 1

FreeObject(s, k) ==
    LET gone == ObjectPages(s.objects[k])
    IN [s EXCEPT !.l2_free = @ \cup gone,
                 !.host_content = [h \in gone |-> NoContent] @@ @,
                 !.objects = Remove(@, {k})]

\* n and every node below it.
RECURSIVE Subtree(_, _)
Subtree(ns, n) == {n} \cup UNION {Subtree(ns, c) : c \in Children(ns, n)}

(* Delete n and its subtree (the reference's stale-tail prune): every device page
   of theirs freed and poisoned, every object of theirs freed and poisoned. *)
PruneSubtree(s, n) ==
    LET sub == Subtree(s.nodes, n)
        devs == UNION {Range(s.nodes[m].dev) : m \in sub}
        objs == {s.nodes[m].host : m \in {m \in sub : s.nodes[m].host # NoObject}}
        gone == UNION {ObjectPages(s.objects[k]) : k \in objs}
    IN [s EXCEPT !.nodes = Remove(@, sub),
                 !.dev_free = @ \cup devs,
                 !.dev_content = [p \in devs |-> NoContent] @@ @,
                 !.l2_free = @ \cup gone,
                 !.host_content = [h \in gone |-> NoContent] @@ @,
                 !.objects = Remove(@, objs)]

(* Drop a device victim: a backed node keeps its host copy, an unbacked one is
   deleted. An unbacked one with (L2-only) children is a victim only under
   UnbackedEvict = "reference": it leaves the tree and a husk stays in its place
   (its parent Gone, its key its whole prefix, off L1), so that its children,
   orphaned, still spell their prefixes; no match reaches them, and they are
   host victims like any other. *)
EvictDeviceNode(s, n) ==
    LET freed == FreeDev(s, s.nodes[n].dev)
    IN IF s.nodes[n].host # NoObject THEN [freed EXCEPT !.nodes[n].dev = <<>>]
       ELSE IF Children(s.nodes, n) = {} THEN [freed EXCEPT !.nodes = Remove(@, {n})]
       ELSE [freed EXCEPT !.nodes[n] = [@ EXCEPT !.parent = Gone, !.key = Prefix(s.nodes, n), !.dev = <<>>]]

\* Drop a host victim: free its object and delete the node (and the husk above
\* it, if it was the husk's last orphan).
EvictHostNode(s, n) ==
    LET p == s.nodes[n].parent
        husk == IF p # Root /\ s.nodes[p].parent = Gone /\ Children(s.nodes, p) = {n} THEN {p} ELSE {}
    IN [FreeObject(s, s.nodes[n].host) EXCEPT !.nodes = Remove(@, {n} \cup husk)]

(* Insert's room: evict device victims in victim order (rank v's; never one of
   `keep`; a parent that becomes evictable joins the order) until every lane has
   need[lane] free pages. `ok` is FALSE when the victims run out first. `have`
   counts each lane's free pages, FreeIn(s.dev_free, lane): an eviction adds
   those of the victim's pages that were not free, rather than a recount of the
   pool per lane. `vs` is DevVictims(r.s) \ keep, kept up to date rather than
   recomputed: evicting n changes the victim test of no node but n, the nodes
   it removes and its parent (the only node whose children change), so the
   victims after it are those before it that are still in the tree, but n, and
   the parent if it passes the test now (VictimsAfter). *)
VictimsAfter(s1, vs, n, p, keep) ==
    {m \in vs : m # n /\ m \in DOMAIN s1.nodes}
        \cup (IF p \notin keep /\ p \in DOMAIN s1.nodes /\ DevEvictableUnder(s1, p, Bug) THEN {p} ELSE {})

MakeRoomStep(r, need, keep, v) ==
    IF \A lane \in Ranks : r.have[lane] >= need[lane] THEN [r EXCEPT !.done = TRUE, !.ok = TRUE]
    ELSE IF r.vs = {} THEN [r EXCEPT !.done = TRUE]
    ELSE LET n == FirstVictimAs(r.s.nodes, r.vs, v)
             gained == Range(r.s.nodes[n].dev) \ r.s.dev_free
             s1 == EvictDeviceNode(r.s, n)
         IN [r EXCEPT !.s = s1,
                      !.vs = VictimsAfter(s1, r.vs, n, r.s.nodes[n].parent, keep),
                      !.have = TLCEval([lane \in Ranks |-> @[lane] + FreeIn(gained, lane)])]

(* room[k]: after k rounds. Each eviction takes a node off L1 and none comes
   on, so the rounds stop within as many as the tree has nodes. *)
MakeRoom(s, need, keep, v) ==
    LET room[k \in Nat] ==
            IF k = 0 THEN [s |-> s, vs |-> DevVictims(s) \ keep,
                           have |-> TLCEval([lane \in Ranks |-> FreeIn(s.dev_free, lane)]),
                           done |-> FALSE, ok |-> FALSE]
            ELSE LET r == room[k - 1] IN IF r.done THEN r ELSE MakeRoomStep(r, need, keep, v)
        r == room[Cardinality(DOMAIN s.nodes) + 1]
    IN [ok |-> r.ok, s |-> r.s]

(* Reserve's room: release host victims from a snapshot of the host order taken
   before, retrying first fit of `len` pages after each; parents that become host
   leaves meanwhile wait for the next round. `ok` is FALSE when the snapshot runs
   out first. The snapshot is the set `victims` with each one's victim key in
   `key` (VictimKeys): each round releases the least of those not released yet,
   which is the snapshot's order one victim at a time, without sorting it all. *)
(* (room[k]: after k releases, k <= Cardinality(victims); the first round that
   finds the run stops) *)
HostRoom(s, len, key, victims) ==
    LET room[k \in Nat] ==
            IF k = 0 THEN [s |-> s, rest |-> victims, done |-> FALSE, ok |-> FALSE]
            ELSE LET r == room[k - 1]
                 IN IF r.done THEN r
                    ELSE IF HasRoom(r.s.l2_free, len) THEN [r EXCEPT !.done = TRUE, !.ok = TRUE]
                    ELSE IF r.rest = {} THEN [r EXCEPT !.done = TRUE]
                    ELSE LET n == LexLeast(key, r.rest)
                         IN [r EXCEPT !.s = EvictHostNode(r.s, n), !.rest = @ \ {n}]
        r == room[Cardinality(victims) + 1]
    IN [ok |-> r.ok, s |-> r.s]

(* Under backup_host_uaf: once the host leaves run out, host eviction also takes
   the slots of the backups in flight, oldest first (`writes` order), until a run
   of `len` pages is free. Nothing pins them: their pages are freed (poisoned)
   while the object and the registration stay, so the copy still lands in them.
   A backup whose pages are free already is passed over. *)
InflightRoom(s, len) ==
    LET room[k \in 0 .. Len(s.writes)] ==
            IF k = 0 THEN [s |-> s, ok |-> HasRoom(s.l2_free, len)]
            ELSE LET r == room[k - 1]
                     n == s.writes[k]
                 IN IF r.ok \/ n \notin r.s.pending THEN r
                    ELSE LET gone == ObjectPages(r.s.objects[n])
                         IN IF gone \cap r.s.l2_free # {} THEN r
                            ELSE LET s1 == [r.s EXCEPT !.l2_free = @ \cup gone,
                                                       !.host_content = [h \in gone |-> NoContent] @@ @]
                                 IN [s |-> s1, ok |-> HasRoom(s1.l2_free, len)]
    IN room[Len(s.writes)]

\* HostRoom over the host victims of `s` in rank v's order (the snapshot of `s`).
HostRoomAs(s0, s, len, v) ==
    LET hv == HostVictims(s)
        r == HostRoom(s0, len, TLCEval(VictimKeys(s.nodes, hv, v)), hv)
    IN IF Bug = "backup_host_uaf" /\ ~r.ok THEN InflightRoom(r.s, len) ELSE r

(* Whether HostRoom finds a run of `len` pages: it does exactly when one is free
   once every host victim of the snapshot is released, since releasing pages
   never takes a free run away and the snapshot's victims are leaves that do
   not depend on each other. (An IF, not a disjunction, so that a guard made of
   it is one branch for TLC; the victims are looked at only when needed.) *)
HostRoomFits(s, len) ==
    IF HasRoom(s.l2_free, len) THEN TRUE
    ELSE IF Bug = "backup_host_uaf" THEN HostRoomAs(s, s, len, NoView).ok
    ELSE HasRoom(s.l2_free \cup UNION {ObjectPages(s.objects[s.nodes[v].host]) : v \in HostVictims(s)}, len)

-----------------------------------------------------------------------------
(* The owner-lane planner (docs/model.md), in its reference form: every
   round rescans the candidates and takes the smallest
   (-contribution, -unlock contribution, victim order). *)

LaneCounts(ns, n) == TLCEval([lane \in Ranks |-> Cardinality({j \in DOMAIN ns[n].dev : Lane(ns[n].dev[j]) = lane})])

\* What evicting n gives the lanes that lack pages (d[lane] of them).
ContributionOf(counts, d) == SumSeq([i \in 1 .. R |-> Min2(counts[i - 1], d[i - 1])])
Contribution(ns, n, d) == ContributionOf(LaneCounts(ns, n), d)

\* Unlocked, on L1, no pending backup, evictable under the policy.
PlanBase(s, n) ==
    LET nd == s.nodes[n]
    IN n # Root /\ nd.dev # <<>> /\ ~HeldOnL1(s, n, Bug)
       /\ (nd.host # NoObject \/ WriteThrough \/ SyncWriteBack)

\* Evictable once the planned victims are gone; an unbacked node (deleted when
\* evicted) must lose every child, and only to unbacked planned victims (under
\* UnbackedEvict = "reference", as in the reference, it may keep L2-only ones).
AfterPlan(s, n, planned) ==
    LET strict == s.nodes[n].host = NoObject /\ UnbackedEvict = "fixed" /\ ~SyncWriteBack
    IN /\ PlanBase(s, n)
       /\ \A c \in Children(s.nodes, n) :
            IF c \in planned THEN ~(strict /\ s.nodes[c].host # NoObject)
            ELSE ~(s.nodes[c].dev # <<>> \/ strict)

(* The same from two sets that one pass over the tree gives for every node (the
   planner's rounds test many candidates against one `planned`): the parents of
   a child on L1 that is not planned, and the parents of a child that is not
   planned or is backed. AfterPlan(s, n, planned) =
   AfterPlanAmong(s, n, KeptOnL1(s, planned), Kept(s, planned)). *)
KeptOnL1(s, planned) == {s.nodes[c].parent : c \in {c \in DOMAIN s.nodes \ planned : s.nodes[c].dev # <<>>}}
Kept(s, planned) ==
    {s.nodes[c].parent : c \in {c \in DOMAIN s.nodes : c \notin planned \/ s.nodes[c].host # NoObject}}

AfterPlanAmong(s, n, keptOnL1, kept) ==
    /\ PlanBase(s, n)
    /\ IF s.nodes[n].host = NoObject /\ UnbackedEvict = "fixed" /\ ~SyncWriteBack THEN n \notin kept
       ELSE n \notin keptOnL1

(* What evicting n would unlock: the contribution of its nearest ancestor on L1
   (`lc` holds LaneCounts of every node on L1). *)
RECURSIVE UnlockFrom(_, _, _, _, _)
UnlockFrom(s, lc, a, d, planned) ==
    IF a = Root \/ a \in planned THEN 0
    ELSE IF s.nodes[a].dev = <<>> THEN UnlockFrom(s, lc, s.nodes[a].parent, d, planned)
    ELSE IF ~PlanBase(s, a) THEN 0
    ELSE LET c == ContributionOf(lc[a], d)
         IN IF c > 0 THEN c ELSE UnlockFrom(s, lc, s.nodes[a].parent, d, planned)

\* (`keptOnL1` and `kept` are KeptOnL1(s, planned) and Kept(s, planned))
RECURSIVE NewCandidate(_, _, _, _, _)
NewCandidate(s, a, planned, keptOnL1, kept) ==
    IF a = Root \/ a \in planned THEN NoNode
    ELSE IF AfterPlanAmong(s, a, keptOnL1, kept) THEN a
    ELSE IF s.nodes[a].dev # <<>> THEN NoNode
    ELSE NewCandidate(s, s.nodes[a].parent, planned, keptOnL1, kept)

PlanScore(s, lc, n, d, planned, v) ==
    LET c == ContributionOf(lc[n], d)
        u == IF c > 0 THEN 0 ELSE UnlockFrom(s, lc, s.nodes[n].parent, d, planned)
    IN <<-c, -u>> \o VictimKeyAs(s.nodes, n, v)

(* One round, from r = [d, cands, planned, victims, done] (rank v's ties): it
   takes the candidate whose score is less (LexLess) than every other's (the
   scores end with the node id, so they are distinct, and each is computed once
   a round), or ends the plan when no lane lacks pages or no candidate
   contributes. `lc` holds LaneCounts of every node on L1. *)
PlanRound(s, lc, r, v) ==
    IF \A lane \in Ranks : r.d[lane] = 0 THEN [r EXCEPT !.done = TRUE]
    ELSE LET keptOnL1 == KeptOnL1(s, r.planned)
             kept == Kept(s, r.planned)
             live == TLCEval({n \in r.cands : n \notin r.planned /\ AfterPlanAmong(s, n, keptOnL1, kept)})
             score == TLCEval([n \in live |-> PlanScore(s, lc, n, r.d, r.planned, v)])
             scored == {n \in live : score[n][1] < 0 \/ score[n][2] < 0}
         IN IF scored = {} THEN [r EXCEPT !.done = TRUE]
            ELSE LET w == LexLeast(score, scored)
                     c == lc[w]
                     p2 == r.planned \cup {w}
                     keptOnL1p2 == KeptOnL1(s, p2)
                     keptp2 == Kept(s, p2)
                     a == NewCandidate(s, s.nodes[w].parent, p2, keptOnL1p2, keptp2)
                 IN [d |-> [lane \in Ranks |-> Max2(0, r.d[lane] - c[lane])],
                     cands |-> (r.cands \ {w}) \cup (IF a = NoNode THEN {} ELSE {a}),
                     planned |-> p2,
                     victims |-> Append(r.victims, w),
                     done |-> FALSE]

(* plan[k]: after k rounds. Every round that goes on plans a node not planned
   before, so the rounds stop within as many as the tree has nodes. *)
Plan(s, deficits, v) ==
    LET lc == TLCEval([n \in {m \in DOMAIN s.nodes : s.nodes[m].dev # <<>>} |-> LaneCounts(s.nodes, n)])
        plan[k \in Nat] ==
            IF k = 0 THEN [d |-> deficits, cands |-> DevVictims(s) \cup SyncVictims(s), planned |-> {},
                           victims |-> <<>>, done |-> FALSE]
            ELSE LET r == plan[k - 1] IN IF r.done THEN r ELSE PlanRound(s, lc, r, v)
        r == plan[Cardinality(DOMAIN s.nodes) + 1]
    IN [victims |-> r.victims, remaining |-> r.d]

\* Evict the victims in order (after[k]: once the first k are evicted).
EvictAll(s, victims) ==
    LET after[k \in Nat] == IF k = 0 THEN s ELSE EvictDeviceNode(after[k - 1], victims[k])
    IN after[Len(victims)]

-----------------------------------------------------------------------------
(* Load-back: the whole nodes directly below a request's lock, along its match
   key, that are only on L2. *)

RECURSIVE HostRunFrom(_, _, _, _, _, _)
HostRunFrom(ns, tokens, cur, i, run, k) ==
    LET c == IF i < Len(tokens) THEN ChildWith(ns, cur, tokens[i + 1], k) ELSE NoNode
    IN IF c = NoNode THEN run
       ELSE IF \/ ns[c].dev # <<>>
               \/ ns[c].host = NoObject
               \/ i + Len(ns[c].key) > Len(tokens)
               \/ SubSeq(tokens, i + 1, i + Len(ns[c].key)) # ns[c].key
            THEN run
       ELSE HostRunFrom(ns, tokens, c, i + Len(ns[c].key), Append(run, c), k)

HostRun(ns, req) == HostRunFrom(ns, MatchKey(req.tokens), req.node, Len(Prefix(ns, req.node)), <<>>, req.ns)

(* Under CarryHostHit: the nodes of the request's recorded host hit that a
   load-back brings back, as the reference walks them: from the recorded node up
   while off L1 (stopping at the request's lock), root first. *)
RECURSIVE CarriedRunFrom(_, _, _, _)
CarriedRunFrom(ns, stop, n, run) ==
    IF n = stop \/ ns[n].dev # <<>> THEN run
    ELSE CarriedRunFrom(ns, stop, ns[n].parent, <<n>> \o run)

CarriedRun(ns, req) == IF req.hit = Root THEN <<>> ELSE CarriedRunFrom(ns, req.node, req.hit, <<>>)

\* What a load-back of `req` brings back: its recorded hit, or the run it finds.
LoadRun(ns, req) == IF CarryHostHit THEN CarriedRun(ns, req) ELSE HostRun(ns, req)

\* The pages of a run of nodes.
RunPages(ns, run) == SumSeq([k \in DOMAIN run |-> Len(ns[run[k]].key)])

(* What a load-back of `req` brings back and the victims it evicts for it: page
   i of the run (1-based) goes to lane (i - 1) mod R, and the owner-lane planner
   (with rank v's ties) frees what the lanes lack (`remaining` is what it could
   not free). *)
LoadBackPlan(s, req, v) ==
    LET run == LoadRun(s.nodes, req)
        count == RunPages(s.nodes, run)
        lanes == [i \in 1 .. count |-> Lane(i - 1)]
        need == LaneNeed(lanes)
        deficit == [lane \in Ranks |-> Max2(0, need[lane] - FreeIn(s.dev_free, lane))]
        \* LoadBackEvict = "whole" (SGLang's evict(num_tokens=len(host_indices))): a
        \* load short of pages evicts for its whole size; what it lacked must be freed
        goal == IF LoadBackEvict = "whole" THEN need ELSE deficit
        plan == IF \A lane \in Ranks : deficit[lane] = 0
                THEN [victims |-> <<>>, remaining |-> deficit]
                ELSE Plan(s, goal, v)
    IN [run |-> run, lanes |-> lanes, victims |-> plan.victims, view |-> v,
        remaining |-> [lane \in Ranks |-> Max2(0, plan.remaining[lane] - (goal[lane] - deficit[lane]))]]

-----------------------------------------------------------------------------
(* L3. A page inside an L2 object or a reload belongs to rank i mod R, i its
   0-based index in it; ranks copy only the pages they own. *)

\* The 0-based indices of the pages rank r owns in a run of n pages.
Owned(r, n) == {i \in 0 .. n - 1 : i % R = r}
OwnedSeq(r, n) == [k \in 1 .. Cardinality(Owned(r, n)) |-> r + (k - 1) * R]

(* A reload's target for a queued request's key: the suffix below its deepest
   whole match (the anchor) when the key misses the tree at a node boundary;
   NoTarget (anchor NoNode) when it diverges inside a node or is all cached. *)
NoTarget == [anchor |-> NoNode, tokens |-> <<>>, hashes |-> <<>>, ns |-> 0]

\* (its hashes are L3 keys, of the request's namespace)
ReloadTarget(ns, req) ==
    LET w == WalkKey(ns, req.tokens, req.ns)
        anchor == IF w.full = <<>> THEN Root ELSE w.full[Len(w.full)]
        tokens == SubSeq(req.tokens, w.covered + 1, Len(req.tokens))
    IN IF w.cut # <<>> \/ w.covered >= Len(req.tokens) THEN NoTarget
       ELSE [anchor |-> anchor, tokens |-> tokens, hashes |-> Chain(KeyPre(req.ns) \o Prefix(ns, anchor), tokens),
             ns |-> req.ns]

\* The leading pages of `hs` whose owned hashes rank r holds, and their MIN over
\* ranks, as rank v decides it: under l3_no_min there is no MIN, and the rank
\* claims what its own disk holds.
ClaimOf(s, r, hs) ==
    Max({n \in 0 .. Len(hs) : \A i \in 0 .. n - 1 : i % R # r \/ hs[i + 1] \in DOMAIN s.l3[r]})
Claimable(s, hs, v) ==
    IF Bug = "l3_no_min" /\ v # NoView THEN ClaimOf(s, v, hs)
    ELSE Min({ClaimOf(s, r, hs) : r \in Ranks})

(* The free run rank v looks for before it reserves `len` host pages: under
   local_host_alloc the rank sizes it from its own view, the pages of the object
   it owns itself (index i mod R), not the whole object every rank shares. *)
RoomNeed(len, v) == IF Bug = "local_host_alloc" /\ v # NoView THEN Cardinality(Owned(v, len)) ELSE len

\* The anchor is still in the tree, the suffix still a clean miss under it (in
\* namespace k), and the anchor's prefix still leads to the suffix's first page hash.
AttachOk(ns, anchor, tokens, first, k) ==
    /\ anchor \in DOMAIN ns
    /\ ChildWith(ns, anchor, tokens[1], k) = NoNode
    /\ KeyPre(k) \o Prefix(ns, anchor) \o <<tokens[1]>> = first

=============================================================================
