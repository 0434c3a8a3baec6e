-------------------------- MODULE MC_durable_split --------------------------
(* Finding (docs/model.md, traces/durable_split.md): the reference keeps a
   node's durable flag on the lower part of a split (and sets it at a spill's ack
   on whatever part of the spilled node is left), whatever the split offset;
   when the offset is not a multiple of R, the lower part's page i is on the disk
   of rank (i + offset) mod R, not of its owner i mod R. DurableSplit =
   "reference" models that, and Durable (invariant 8) fails: [1, 2] is cached,
   backed up and spilled (durable), then [1, 3] matches [1] and splits it after
   one page. *)
EXTENDS KVCache

MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0],
               [pages |-> <<1, 3>>, out_pages |-> 0]}

MC_NodeIds == 1 .. 6
MC_NodeIdsCovered == DOMAIN nodes \subseteq {Root} \cup MC_NodeIds
=============================================================================
