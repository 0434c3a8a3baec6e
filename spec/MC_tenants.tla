------------------------------- MODULE MC_tenants -------------------------------
(* The `tenants` model: the constants of kvsm's built-in config `tenants`
   (kvsm/configs/tenants.toml). Two namespaces (tenants, LoRA adapters) share a
   prompt's first page on `l3-small`'s cluster: [1] arrives in namespace 0 and
   [1, 2] in namespace 1. [1] is backed up, committed, spilled and evicted;
   [1, 2] misses the tree (namespace 0's node is not its own) and may reload
   page [1] from L3. With L3Key = "namespace" every invariant holds, Isolation
   (15) among them; MC_tenants_tokens is the same model at the reference's key,
   the tokens alone, where it fails (docs/findings.md). *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0, ns |-> 0],
               [pages |-> <<1, 2>>, out_pages |-> 0, ns |-> 1]}

MC_NoDiskFault == -1

MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
