-------------------------------- MODULE MC_l3 --------------------------------
(* The `l3` model: the constants of kvsm's built-in config `l3`
   (kvsm/configs/l3.toml). Two ranks, one device page per lane, a two-page host
   pool and a two-page disk per rank; two requests, one alive at a time, that
   share their first page. The first request's pages are backed up, committed,
   spilled to both disks and evicted; the second one's miss below the shared
   page is marked and reloaded, so every L3 action happens: spills (one with a
   failed write on a rank while its disk fails), claims lowered below the
   candidate's pages, reloads admitted, reloads aborted at admit (a failed read,
   every waiter expired), and expiries; and, since a match stops one page short
   of its prompt and splits there, a reload whose anchor changed and one after a
   split that moved the pages' owners (docs/tla.md, "The models"). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
