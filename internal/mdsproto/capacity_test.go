package mdsproto

import "testing"

// `braid status` counted one shared disk once per OSD: six OSDs in
// directories of one 252 GB disk made "of 1.5 TiB". A disk is counted
// once, bounded by the OSDs' quotas on it.
func TestSumCapacityCountsADiskOnce(t *testing.T) {
	const disk = 252 << 30
	var osds []OSDStatus
	for i := 0; i < 6; i++ {
		osds = append(osds, OSDStatus{ID: uint32(i), State: StateUp, Disk: "m1:2049", DiskBytes: disk, DiskFreeBytes: 200 << 30,
			CapacityBytes: disk, UsedBytes: 1 << 30, FreeBytes: 200 << 30})
	}
	capacity, used, free := SumCapacity(osds)
	if capacity != disk || used != 6<<30 || free != 200<<30 {
		t.Fatalf("six OSDs on one disk: capacity %d, used %d, free %d; want %d, %d, %d", capacity, used, free, disk, 6<<30, 200<<30)
	}
	// Quotas (--capacity) on a shared disk: their sum, up to the disk.
	for i := range osds {
		osds[i].CapacityBytes, osds[i].FreeBytes = 10<<30, 9<<30
	}
	capacity, _, free = SumCapacity(osds)
	if capacity != 60<<30 || free != 54<<30 {
		t.Fatalf("six 10 GiB quotas on one disk: capacity %d, free %d; want %d, %d", capacity, free, 60<<30, 54<<30)
	}
	// OSDs on disks of their own, and ones that do not name their disk
	// (older OSDs), are summed as before.
	osds = []OSDStatus{
		{ID: 1, State: StateUp, Disk: "m1:1", DiskBytes: 100, DiskFreeBytes: 50, CapacityBytes: 100, UsedBytes: 40, FreeBytes: 50},
		{ID: 2, State: StateUp, Disk: "m2:1", DiskBytes: 100, DiskFreeBytes: 60, CapacityBytes: 100, UsedBytes: 30, FreeBytes: 60},
		{ID: 3, State: StateUp, CapacityBytes: 100, UsedBytes: 20, FreeBytes: 70},
		{ID: 4, State: StateOut, CapacityBytes: 100, UsedBytes: 20, FreeBytes: 70},
	}
	capacity, used, free = SumCapacity(osds)
	if capacity != 300 || used != 90 || free != 180 {
		t.Fatalf("three disks and an OSD out: capacity %d, used %d, free %d; want 300, 90, 180", capacity, used, free)
	}
}
