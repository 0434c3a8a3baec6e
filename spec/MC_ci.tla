-------------------------------- MODULE MC_ci --------------------------------
(* The `ci` model: the constants of kvsm's built-in config `small`
   (kvsm/configs/small.toml), small enough for TLC to enumerate in CI and for
   `kvsm conform` to compare with the Python model's exploration. *)
EXTENDS KVView

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0],
               [pages |-> <<4, 5>>, out_pages |-> 0]}

\* Liveness quantifies over node ids; this config never creates more than these,
\* which MC_NodeIdsCovered checks in every state.
MC_NodeIds == 1 .. 5
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
