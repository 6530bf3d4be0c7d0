// Package route decides which MDS process serves each slot: Slice's
// directory service, whose logical servers (slots) map to machines.
//
// Slots. Every inode number carries its slot in its low SlotBits bits,
// so whoever holds an inode number (a client, another MDS) knows its
// slot with no lookup, and several MDS processes split the namespace by
// slot. A file, symlink or special node is born in its directory's
// slot, so the operations on a directory and the files in it stay with
// one owner. A new directory stays in its parent's slot too, except with
// probability MkdirSwitch, when it goes to a slot chosen by hashing its
// parent and name (Slice's mkdir switching, with its hashing of names):
// that is what spreads a tree over the processes (NewDirSlot). Inode
// numbers made before slots keep their low bits, as good a slot as any.
// Number n of a range of the inode counter becomes n<<SlotBits | slot
// (InoInSlot).
//
// The table. The MDS keeps it in the engine, written only by the elected
// leader in transactions guarded by its lead; every other process reads
// it, serves the slots it names it for, and commits only while the
// table is as it read it, so a process whose slots moved cannot change
// their inodes after the move. Plan decides the next table from the
// previous one and the processes alive: it keeps every slot whose owner
// is alive where it is, gives the slots of the dead to the living with
// fewest, and then evens the counts out to within one, moving as few
// slots as it can. Changes says what a process gains and loses from one
// table to the next, GraceAfterSkips which slots must wait a grace
// before locks and claims are granted in them (a process that skipped a
// table may hold a slot that was another's in between).
//
// The MDS's routing.go is the shell: it reads the processes alive and
// the stored table, calls Plan, stores what it returns and serves by it.
// The transcripts in testdata name joins, failures, address changes and
// skipped tables; every table Plan returns passes checkPlan in race and
// invariants builds.
package route
