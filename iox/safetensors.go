package iox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/k3go/k3/tensor"
)

// ErrFormat reports a file that is not a valid safetensors file: a header
// that is truncated, too large, not JSON, or describes tensors whose bytes
// overlap, run past the end of the file, or disagree with their shape.
var ErrFormat = errors.New("invalid safetensors file")

// MaxHeaderBytes bounds the JSON header k3 will read from one file. The
// released Kimi K3 shards have headers under 1 MiB each.
const MaxHeaderBytes = 256 << 20

// maxRank bounds the number of dimensions of one tensor.
const maxRank = 16

// TensorInfo describes one tensor of a safetensors file.
type TensorInfo struct {
	Name  string
	DType tensor.DType // Invalid for a known safetensors type k3 cannot compute with (I64, F8, ...)
	// Stored is the dtype string as written in the file.
	Stored string
	Shape  []int
	// Offset and Size locate the bytes in the file (Offset is absolute:
	// 8 + header length + data_offsets[0]).
	Offset, Size int64
}

// Header is the parsed header of one safetensors file.
type Header struct {
	Tensors  []TensorInfo      // sorted by Offset
	Metadata map[string]string // the optional __metadata__ object
	DataOff  int64             // absolute offset of the data section
	FileSize int64
}

// storedSizes are the element sizes of every safetensors dtype, so that
// files with types k3 does not compute with (a vision tower's I64, say) can
// still be validated and indexed.
var storedSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "E8M0": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// ReadHeader parses and validates the header of a safetensors file of the
// given size. name is used in errors only. Every tensor's byte range must
// lie inside the data section, match shape × dtype size, and not overlap
// another tensor's.
func ReadHeader(r io.ReaderAt, size int64, name string) (*Header, error) {
	n, err := headerLen(r, size, name)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil {
		return nil, fmt.Errorf("%s: reading %d-byte header: %w", name, n, err)
	}
	h, err := ParseHeader(buf, size-8-int64(n))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h.DataOff = 8 + int64(n)
	h.FileSize = size
	for i := range h.Tensors {
		h.Tensors[i].Offset += h.DataOff
	}
	return h, nil
}

// headerLen reads and checks the header length of a safetensors file of
// the given size, before anything is allocated for the header.
func headerLen(r io.ReaderAt, size int64, name string) (int64, error) {
	if size < 8 {
		return 0, fmt.Errorf("%s: %w: file is %d bytes, shorter than the 8-byte header length", name, ErrFormat, size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return 0, fmt.Errorf("%s: reading header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderBytes {
		return 0, fmt.Errorf("%s: %w: header length %d exceeds the %d-byte limit", name, ErrFormat, n, MaxHeaderBytes)
	}
	if int64(n) > size-8 {
		return 0, fmt.Errorf("%s: %w: header length %d runs past the end of the %d-byte file", name, ErrFormat, n, size)
	}
	return int64(n), nil
}

// ParseHeader parses the JSON header of a safetensors file whose data
// section holds dataSize bytes. Offsets in the result are relative to the
// data section. Duplicate names, unknown dtypes, negative dimensions, and
// ranges that overlap, run past dataSize, or disagree with shape × dtype are
// errors wrapping ErrFormat.
func ParseHeader(buf []byte, dataSize int64) (*Header, error) {
	h, ok := scanHeader(buf, dataSize)
	if !ok {
		var err error
		if h, err = decodeHeader(buf, dataSize); err != nil {
			return nil, err
		}
	}
	// Reject overlapping ranges. Empty tensors occupy no bytes.
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Size < b.Size
	})
	var end int64
	var prev string
	for _, t := range h.Tensors {
		if t.Size == 0 {
			continue
		}
		if t.Offset < end {
			return nil, fmt.Errorf("%w: tensor %q [%d, %d) overlaps tensor %q ending at %d", ErrFormat, t.Name, t.Offset, t.Offset+t.Size, prev, end)
		}
		end, prev = t.Offset+t.Size, t.Name
	}
	return h, nil
}

// decodeHeader is ParseHeader's reading of the JSON with encoding/json, in
// file order: the reference for scanHeader, and the parser of every header
// outside its subset (where the errors come from).
func decodeHeader(buf []byte, dataSize int64) (*Header, error) {
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrFormat)
	}
	h := &Header{}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, fmt.Errorf("%w: tensor %q listed twice", ErrFormat, name)
		}
		seen[name] = true
		if name == "__metadata__" {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrFormat, err)
			}
			h.Metadata = md
			continue
		}
		var e struct {
			DType   *string        `json:"dtype"`
			Shape   []json.Number  `json:"shape"`
			Offsets []json.Number  `json:"data_offsets"`
			Extra   map[string]any `json:"-"`
		}
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		ti, err := tensorInfo(name, e.DType, e.Shape, e.Offsets, dataSize)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, ti)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrFormat, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the header object", ErrFormat)
	}
	return h, nil
}

// storedNames interns the dtype strings of storedSizes, so that the fast
// path allocates no string per tensor for them.
var storedNames = func() map[string]string {
	m := make(map[string]string, len(storedSizes))
	for k := range storedSizes {
		m[k] = k
	}
	return m
}()

// scanHeader is decodeHeader for the headers writers produce (the
// scanner's subset, each tensor's keys exactly "dtype", "shape" and
// "data_offsets", __metadata__ an object of strings), several times
// faster. It returns false for anything else, valid or not, and for a
// tensor decodeHeader would refuse, so that decodeHeader then gives the
// verdict and the error.
func scanHeader(buf []byte, dataSize int64) (*Header, bool) {
	s := &scanner{b: buf}
	if !s.eat('{') {
		return nil, false
	}
	h := &Header{}
	if s.eat('}') {
		return h, s.end()
	}
	seen := make(map[string]struct{})
	var nums []int64
	dims := make([]int, 0, 64) // shapes are cut from one array per header
	for {
		key, ok := s.str()
		if !ok || !s.eat(':') {
			return nil, false
		}
		if _, dup := seen[string(key)]; dup {
			return nil, false
		}
		name := string(key)
		seen[name] = struct{}{}
		if name == "__metadata__" {
			if h.Metadata, ok = s.stringMap(); !ok {
				return nil, false
			}
		} else {
			var ti TensorInfo
			if ti, nums, dims, ok = s.tensor(name, nums, dims, dataSize); !ok {
				return nil, false
			}
			h.Tensors = append(h.Tensors, ti)
		}
		if s.eat('}') {
			return h, s.end()
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// stringMap reads an object of strings.
func (s *scanner) stringMap() (map[string]string, bool) {
	if !s.eat('{') {
		return nil, false
	}
	m := map[string]string{}
	if s.eat('}') {
		return m, true
	}
	for {
		k, ok := s.str()
		if !ok || !s.eat(':') {
			return nil, false
		}
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		m[string(k)] = string(v)
		if s.eat('}') {
			return m, true
		}
		if !s.eat(',') {
			return nil, false
		}
	}
}

// tensor reads one tensor's object and checks it as tensorInfo does;
// nums is scratch, dims the shapes' backing array.
func (s *scanner) tensor(name string, nums []int64, dims []int, dataSize int64) (TensorInfo, []int64, []int, bool) {
	var (
		dtype            string
		shape, offs      []int64
		hasD, hasS, hasO bool
	)
	if !s.eat('{') {
		return TensorInfo{}, nums, dims, false
	}
	nums = nums[:0]
	if !s.eat('}') {
		for {
			key, ok := s.str()
			if !ok || !s.eat(':') {
				return TensorInfo{}, nums, dims, false
			}
			switch string(key) {
			case "dtype":
				v, ok := s.str()
				if !ok || hasD {
					return TensorInfo{}, nums, dims, false
				}
				if dtype, ok = storedNames[string(v)]; !ok {
					return TensorInfo{}, nums, dims, false
				}
				hasD = true
			case "shape":
				start := len(nums)
				if nums, ok = s.integers(nums); !ok || hasS {
					return TensorInfo{}, nums, dims, false
				}
				shape, hasS = nums[start:len(nums):len(nums)], true
			case "data_offsets":
				start := len(nums)
				if nums, ok = s.integers(nums); !ok || hasO {
					return TensorInfo{}, nums, dims, false
				}
				offs, hasO = nums[start:len(nums):len(nums)], true
			default:
				return TensorInfo{}, nums, dims, false
			}
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return TensorInfo{}, nums, dims, false
			}
		}
	}
	// tensorInfo's checks; a failure is left to it.
	if !hasD || !hasS || !hasO || len(shape) > maxRank || len(offs) != 2 {
		return TensorInfo{}, nums, dims, false
	}
	if cap(dims)-len(dims) < len(shape) {
		dims = make([]int, 0, max(1024, len(shape)))
	}
	d := dims[len(dims) : len(dims)+len(shape) : len(dims)+len(shape)]
	dims = dims[:len(dims)+len(shape)]
	elems := int64(1)
	for i, v := range shape {
		if v < 0 || v > 1<<40 || (v != 0 && elems > (1<<62)/v) {
			return TensorInfo{}, nums, dims, false
		}
		d[i] = int(v)
		elems *= v
	}
	begin, end := offs[0], offs[1]
	if begin < 0 || end < begin || end > dataSize || elems*int64(storedSizes[dtype]) != end-begin {
		return TensorInfo{}, nums, dims, false
	}
	dt, err := tensor.ParseDType(dtype)
	if err != nil {
		dt = tensor.Invalid
	}
	return TensorInfo{Name: name, DType: dt, Stored: dtype, Shape: d, Offset: begin, Size: end - begin}, nums, dims, true
}

func tensorInfo(name string, dtype *string, shape, offs []json.Number, dataSize int64) (TensorInfo, error) {
	fail := func(format string, args ...any) (TensorInfo, error) {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q: %s", ErrFormat, name, fmt.Sprintf(format, args...))
	}
	if dtype == nil {
		return fail("no dtype")
	}
	esize, known := storedSizes[*dtype]
	if !known {
		return fail("unknown dtype %q", *dtype)
	}
	if shape == nil {
		return fail("no shape")
	}
	if len(shape) > maxRank {
		return fail("rank %d exceeds %d", len(shape), maxRank)
	}
	dims := make([]int, len(shape))
	elems := int64(1)
	for i, d := range shape {
		v, err := strconv.ParseInt(d.String(), 10, 64)
		if err != nil || v < 0 || v > 1<<40 {
			return fail("bad dimension %s", d)
		}
		dims[i] = int(v)
		if v != 0 && elems > (1<<62)/v {
			return fail("shape %v overflows", dims)
		}
		elems *= v
	}
	if len(offs) != 2 {
		return fail("data_offsets must have 2 entries, has %d", len(offs))
	}
	begin, err1 := strconv.ParseInt(offs[0].String(), 10, 64)
	end, err2 := strconv.ParseInt(offs[1].String(), 10, 64)
	if err1 != nil || err2 != nil || begin < 0 || end < begin {
		return fail("bad data_offsets [%s, %s]", offs[0], offs[1])
	}
	if end > dataSize {
		return fail("data_offsets [%d, %d) run past the %d-byte data section", begin, end, dataSize)
	}
	if want := elems * int64(esize); want != end-begin {
		return fail("shape %v of %s needs %d bytes, data_offsets give %d", dims, *dtype, want, end-begin)
	}
	dt, err := tensor.ParseDType(*dtype)
	if err != nil {
		dt = tensor.Invalid
	}
	return TensorInfo{Name: name, DType: dt, Stored: *dtype, Shape: dims, Offset: begin, Size: end - begin}, nil
}
