package storage

import (
	"encoding/binary"
	"os"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Extent is one run of a file's blocks as FS_IOC_FIEMAP reports it: Length bytes at Logical in
// the file live at Physical on the device.
type Extent struct {
	Logical, Physical, Length uint64
	Flags                     uint32
}

// Extent flags (linux/fiemap.h) this package looks at.
const (
	ExtentLast        = 0x1
	ExtentUnknown     = 0x2
	ExtentDelalloc    = 0x4
	ExtentEncoded     = 0x8
	ExtentNotAligned  = 0x100
	ExtentDataInline  = 0x200
	ExtentUnwritten   = 0x800
	ExtentShared      = 0x2000
	extentUnreliable  = ExtentUnknown | ExtentDelalloc | ExtentEncoded | ExtentNotAligned | ExtentDataInline
	fiemapFlagSync    = 0x1
	fsIocFiemap       = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapHeaderBytes = 32
	fiemapExtentBytes = 56
	fiemapBatch       = 512
)

// Reliable says the extent's physical address names its bytes: two files whose ranges map to
// the same reliable extents hold the same bytes there (a reflink shares blocks; a write to
// either moves that range to new blocks).
func (e Extent) Reliable() bool { return e.Flags&extentUnreliable == 0 }

// Extents maps f's blocks, flushing its dirty pages first (so no range is left delayed). A
// filesystem without FIEMAP answers an error; callers fall back to reading.
func Extents(f *os.File) ([]Extent, error) {
	buf := make([]byte, fiemapHeaderBytes+fiemapBatch*fiemapExtentBytes)
	var out []Extent
	var start uint64
	le := binary.LittleEndian
	for {
		clear(buf[:fiemapHeaderBytes])
		le.PutUint64(buf[0:], start)
		le.PutUint64(buf[8:], ^uint64(0)-start) // to the end of the file
		le.PutUint32(buf[16:], fiemapFlagSync)
		le.PutUint32(buf[24:], fiemapBatch)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
			return nil, &os.PathError{Op: "fiemap", Path: f.Name(), Err: errno}
		}
		n := int(le.Uint32(buf[20:]))
		if n == 0 {
			return out, nil
		}
		for i := range n {
			e := buf[fiemapHeaderBytes+i*fiemapExtentBytes:]
			out = append(out, Extent{Logical: le.Uint64(e[0:]), Physical: le.Uint64(e[8:]), Length: le.Uint64(e[16:]), Flags: le.Uint32(e[40:])})
		}
		last := out[len(out)-1]
		if last.Flags&ExtentLast != 0 {
			return out, nil
		}
		start = last.Logical + last.Length
	}
}

// ExtentsIn returns the parts of exts (sorted, as Extents answers) inside [off, off+n), clipped
// to it, with Logical made relative to off, and runs contiguous in the file and on the device
// merged (two files sharing blocks may record them in differently split extents).
func ExtentsIn(exts []Extent, off, n uint64) []Extent {
	var out []Extent
	end := off + n
	i := sort.Search(len(exts), func(i int) bool { return exts[i].Logical+exts[i].Length > off })
	for _, e := range exts[i:] {
		if e.Logical >= end {
			break
		}
		lo, hi := max(e.Logical, off), min(e.Logical+e.Length, end)
		c := Extent{Logical: lo - off, Physical: e.Physical + (lo - e.Logical), Length: hi - lo, Flags: e.Flags &^ (ExtentLast | ExtentShared)}
		if k := len(out) - 1; k >= 0 && out[k].Logical+out[k].Length == c.Logical &&
			out[k].Physical+out[k].Length == c.Physical && out[k].Flags == c.Flags {
			out[k].Length += c.Length
			continue
		}
		out = append(out, c)
	}
	return out
}
