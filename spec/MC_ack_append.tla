------------------------------ MODULE MC_ack_append ------------------------------
(* The `ack_append` model (docs/model.md, the commit collective): a rank's final
   write ack is appended to its queue before its copy finishes (AckTiming =
   "reference"), on the production write-through path (PreparedBackups: the ack
   of a prepared backup is appended during the forward pass, before its insert
   attaches it). One request ([1, 2]), two ranks:
   acks appended by one rank and not the other, finished on one and not the
   other, rolled back after their append, committed by a MIN of finished counts.
   Its cfg keeps CommitEntry = "fixed" so that what it checks is the append
   alone: a commit takes only finished copies (Content, Pending). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
