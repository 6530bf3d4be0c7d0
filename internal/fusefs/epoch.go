package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Names the kernel keeps. With the metadata cache, the kernel may keep a
// name (its dentry) for the rest of the cache's lease, if the mount can
// drop it the moment the MDS recalls the directory, before the
// acknowledgement. FUSE_NOTIFY_INVAL_ENTRY cannot be used for that: it
// takes the directory's lock, which an operation of this very mount may
// hold while it waits for the change that sent the recall. Linux 6.16's
// FUSE_NOTIFY_INC_EPOCH takes no lock: it moves the connection's epoch,
// and the kernel drops every dentry made in an older one when it next
// meets it (a lookup notes the epoch before it asks, so an answer that
// crosses a move is dropped too). So the mount hands out timed names only
// where it can move the epoch: it mounts /dev/fuse itself (go-fuse takes
// the descriptor as /dev/fd/N) and keeps a duplicate to write the
// notification on. Each recall of a directory the kernel was given a
// timed name in moves the epoch, which drops all the mount's names: the
// next path walk asks the mount again, answered from memory.

// notifyIncEpoch is FUSE_NOTIFY_INC_EPOCH (include/uapi/linux/fuse.h).
const notifyIncEpoch = 8

// epochs moves the kernel's dentry epoch and remembers the directories
// the kernel holds timed names in since the last move.
type epochs struct {
	mu    sync.Mutex
	fd    int                 // a duplicate of the mount's /dev/fuse descriptor; -1 when closed
	dead  bool                // a move failed: no more names are handed out
	timed map[uint64]struct{} // directories with names handed out since the last move
	until time.Time           // when the last name handed out expires in the kernel
	// Until selfDoubtUntil, this mount's own changes move the epoch too:
	// one that failed without a clear answer may still be done later.
	selfDoubtUntil time.Time
}

// selfDoubt is how long after a change failed without a clear answer the
// mount treats its own changes like anyone's.
const selfDoubt = time.Minute

// newEpochs checks that the kernel takes the notification (it moves the
// epoch once) and returns nil if not.
func newEpochs(fuseFD int) (*epochs, error) {
	fd, err := unix.FcntlInt(uintptr(fuseFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	e := &epochs{fd: fd, timed: map[uint64]struct{}{}}
	if err := e.write(); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return e, nil
}

// write sends FUSE_NOTIFY_INC_EPOCH: an out header with unique 0, the
// code as its error, and no body.
func (e *epochs) write() error {
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(h)))
	binary.LittleEndian.PutUint32(h[4:], notifyIncEpoch)
	_, err := syscall.Write(e.fd, h[:])
	return err
}

// mark notes that the kernel is about to be given a timed name in dir,
// and reports whether it may be. It comes before the cache is asked
// whether the name may be timed, so a recall of dir racing with the
// answer finds dir marked.
func (e *epochs) mark(dir uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return false
	}
	e.timed[dir] = struct{}{}
	return true
}

// gave notes a name handed to the kernel for d.
func (e *epochs) gave(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if u := time.Now().Add(d); u.After(e.until) {
		e.until = u
	}
}

// distrustSelf makes this mount's own changes move the epoch for a while.
func (e *epochs) distrustSelf() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.selfDoubtUntil = time.Now().Add(selfDoubt)
}

// changed moves the epoch if the kernel may hold timed names in dir and
// the change is someone else's (or this mount's, while in doubt). It
// returns once the kernel has taken the move, or, if it refused it, once
// every name handed out has expired: the recall must not be acknowledged
// while the kernel may still answer from one.
func (e *epochs) changed(dir uint64, self bool) {
	e.mu.Lock()
	_, timed := e.timed[dir]
	if !timed || self && !time.Now().Before(e.selfDoubtUntil) {
		e.mu.Unlock()
		return
	}
	e.moveAndUnlock()
}

// doubt moves the epoch if the kernel holds any timed names (as changed).
func (e *epochs) doubt() {
	e.mu.Lock()
	if len(e.timed) == 0 {
		e.mu.Unlock()
		return
	}
	e.moveAndUnlock()
}

// moveAndUnlock moves the epoch, unlocks, and if the kernel refused the
// move waits until the names handed out have expired. A connection that
// is gone (ENODEV: unmounted) serves no names and needs no wait.
func (e *epochs) moveAndUnlock() {
	clear(e.timed)
	err := errors.New("closed")
	if e.fd >= 0 {
		err = e.write()
	}
	if err == nil {
		e.mu.Unlock()
		return
	}
	e.dead = true
	until := e.until
	e.mu.Unlock()
	if !errors.Is(err, syscall.ENODEV) {
		time.Sleep(time.Until(until))
	}
}

func (e *epochs) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd >= 0 {
		syscall.Close(e.fd)
		e.fd = -1
	}
	e.dead = true
}

// mountFuse does what go-fuse's direct mount does, keeping the
// descriptor: it opens /dev/fuse and mounts it at dir. It needs root.
func mountFuse(dir string, o *fuse.MountOptions) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return -1, err
	}
	fd, err := syscall.Open("/dev/fuse", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	opts := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&syscall.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", o.MaxWrite),
	}
	opts = append(opts, o.Options...)
	if o.AllowOther {
		opts = append(opts, "allow_other")
	}
	source := o.FsName
	if source == "" {
		source = o.Name
	}
	err = syscall.Mount(source, dir, "fuse."+o.Name, syscall.MS_NOSUID|syscall.MS_NODEV, strings.Join(opts, ","))
	if err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Server is a mounted file system.
type Server struct {
	*fuse.Server
	m      *mount
	dir    string  // where it is mounted, when braid mounted it itself
	epochs *epochs // nil: the kernel keeps no names
}

// Unmount unmounts the file system and waits for its requests to end.
func (s *Server) Unmount() error {
	if s.dir == "" {
		return s.Server.Unmount()
	}
	var err error
	for try := 0; try < 5; try++ {
		// The kernel may still count a file as open for a moment
		// after its last close.
		if err = syscall.Unmount(s.dir, 0); !errors.Is(err, syscall.EBUSY) {
			break
		}
		sleepBriefly(try)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", s.dir, err)
	}
	s.Server.Wait()
	if s.epochs != nil {
		s.epochs.close()
	}
	return nil
}

// sleepBriefly backs off before retry try+1 of an unmount: 5, 15, 35 ms...
func sleepBriefly(try int) {
	time.Sleep(time.Duration(5*(1<<(try+1))-5) * time.Millisecond)
}

// pollHackName is the name go-fuse answers at the root to end the
// kernel's FUSE_POLL requests (go-fuse's fuse/poll.go).
const pollHackName = ".go-fuse-epoll-hack"

// pollHack opens that name and polls it once, so the kernel asks FUSE_POLL,
// is told ENOSYS, and asks no more.
func pollHack(dir string) {
	fd, err := syscall.Open(filepath.Join(dir, pollHackName), syscall.O_RDONLY, 0)
	if err != nil {
		return
	}
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	syscall.Close(fd)
}
