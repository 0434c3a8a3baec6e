----------------------------- MODULE MC_tenant_salt -----------------------------
(* The `tenants` model (MC_tenants) with namespaces 1 and 2 in place of 0 and 1:
   LoRA adapter 1 and cache salt 1, the pair whose tree key collides under
   lora_salt_collision (the adapter name and the salt joined without a
   delimiter: docs/defects.md). [1] arrives in namespace 1 and [1, 2] in
   namespace 2; without a defect every invariant holds, Isolation (15) among
   them; under lora_salt_collision namespace 2's match takes namespace 1's node. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0, ns |-> 1],
               [pages |-> <<1, 2>>, out_pages |-> 0, ns |-> 2]}

MC_NoDiskFault == -1

MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
