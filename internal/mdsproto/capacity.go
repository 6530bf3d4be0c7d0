package mdsproto

// SumCapacity adds up the space of the OSDs in the cluster (those out of
// it left aside), counting each disk once: OSDs that name the same disk
// (OSDStatus.Disk: several OSDs in directories of one file system, as
// `braid up` makes) share it, so together they hold at most the disk and
// at most the sum of their quotas (--capacity), and have free at most the
// disk's free space. Used space is each OSD's own objects, never shared.
func SumCapacity(osds []OSDStatus) (capacity, used, free int64) {
	type disk struct{ bytes, free, capacity, osdFree int64 }
	disks := map[string]*disk{}
	for _, o := range osds {
		if o.State == StateOut {
			continue
		}
		used += o.UsedBytes
		if o.Disk == "" {
			capacity += o.CapacityBytes
			free += o.FreeBytes
			continue
		}
		d := disks[o.Disk]
		if d == nil {
			d = &disk{}
			disks[o.Disk] = d
		}
		d.bytes, d.free = max(d.bytes, o.DiskBytes), max(d.free, o.DiskFreeBytes)
		d.capacity += o.CapacityBytes
		d.osdFree += o.FreeBytes
	}
	for _, d := range disks {
		capacity += min(d.capacity, d.bytes)
		free += min(d.osdFree, d.free)
	}
	return capacity, used, free
}
