------------------------- MODULE MC_own_disk_durable -------------------------
(* The reference's spill maintainer marks an object durable, without a spill,
   when its own rank's disk already holds the pages (the exists_prefix shortcut):
   a replicated decision from a rank-local fact, with no MIN. OwnDiskDurable =
   "reference" models it, and Agreement (invariant 13) fails, with Durable
   (invariant 8) in rank 0's replica: [1, 2] is cached, backed up and spilled
   while rank 1's disk fails, so only rank 0 wrote its page; the node leaves the
   cache, [1, 2] comes again and is committed again, and at its SpillSubmit rank
   0 marks it durable while rank 1 pins and submits it. With "fixed" the model
   holds. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1>>, out_pages |-> 0], [pages |-> <<1, 2>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
