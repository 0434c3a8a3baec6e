---------------------------- MODULE MC_prepared ----------------------------
(* The `prepared` model: the ci model's constants with prepared write-through
   backups (PreparedBackups), two requests ([1, 2] and [1, 3]), one alive at a
   time. It prepares backups that fit and that do not, attaches them at insert,
   rolls them back at insert (a host eviction between the prepare and the
   insert changed the new node's length) and at abort, and holds the commit
   frontier behind a prepared backup not attached yet. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
