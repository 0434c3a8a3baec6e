---------------------------- MODULE MC_tenants_tokens ----------------------------
(* The `tenants` model (MC_tenants) at the reference's L3 key: L3Key = "tokens",
   its content hash over token ids alone. Namespace 0's page [1] is spilled to
   rank 0's disk under the key of the tokens [1]; namespace 1's [1, 2] misses the
   tree and its reload claims that key: Isolation (15) fails at the read, which
   brings namespace 0's KV into namespace 1's reload (docs/findings.md). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0, ns |-> 0],
               [pages |-> <<1, 2>>, out_pages |-> 0, ns |-> 1]}

MC_NoDiskFault == -1

MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
