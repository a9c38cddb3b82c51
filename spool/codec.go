package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/go-llmflow/llmflow"
)

// A segment file is a header followed by frames:
//
//	header:  "LLMFSPL1" (8 bytes)
//	frame:   length uint32 LE | crc uint32 LE | payload (length bytes)
//
// crc is the CRC-32C (Castagnoli) of the payload. A frame is good when its
// length is in (0, MaxFrame], the whole payload is in the file, the CRC
// matches and the payload decodes. The first frame that is not good ends
// what a reader accepts: appends are the only writes, so a bad frame is a
// torn write at the tail (a crash or power loss during an append) or
// corruption, and nothing after it can be trusted to be framed.
//
// The payload is a version byte (1) and the record's fields in
// declaration order: integers as varints, strings and the tag list
// length-prefixed (uvarint), GPU-hours as IEEE-754 bits, Estimated and
// Stream as one flags byte. Hand-written rather than JSON or gob: it is on
// the request path (one encode per record), allocates nothing into a
// reused buffer, and is small enough to fuzz completely.
const (
	segmentMagic = "LLMFSPL1"
	frameHeader  = 8
	// MaxFrame bounds a frame's payload: a length beyond it is corruption,
	// never a record (records are a few hundred bytes).
	MaxFrame      = 1 << 20
	payloadV1     = 1
	flagEstimated = 1 << 0
	flagStream    = 1 << 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends r's frame to b.
func appendFrame(b []byte, r *llmflow.Record) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = appendPayload(b, r)
	payload := b[start+frameHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

func appendPayload(b []byte, r *llmflow.Record) []byte {
	b = append(b, payloadV1)
	b = binary.AppendVarint(b, r.Time.Unix())
	b = binary.AppendUvarint(b, uint64(r.Time.Nanosecond()))
	for _, s := range [...]string{r.RequestID, r.KeyID, r.Project, r.Team, r.Org, r.Model, r.Pool, r.Upstream} {
		b = appendString(b, s)
	}
	b = binary.AppendVarint(b, r.PromptTokens)
	b = binary.AppendVarint(b, r.CompletionTokens)
	b = binary.AppendVarint(b, r.CachedTokens)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.GPUHours))
	b = binary.AppendVarint(b, int64(r.Status))
	b = appendString(b, string(r.Outcome))
	var flags byte
	if r.Estimated {
		flags |= flagEstimated
	}
	if r.Stream {
		flags |= flagStream
	}
	b = append(b, flags)
	b = appendString(b, string(r.EstimateReason))
	b = binary.AppendVarint(b, int64(r.Priority))
	b = binary.AppendVarint(b, int64(r.Latency))
	b = binary.AppendVarint(b, int64(r.TTFB))
	b = binary.AppendUvarint(b, uint64(len(r.Tags)))
	for _, t := range r.Tags {
		b = appendString(b, t)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// errShort is a frame whose header or payload goes beyond the data.
var errShort = errors.New("frame cut short")

// nextFrame reads the frame at the start of b. It returns the record, the
// frame's length in bytes, or an error saying why the frame is not good
// (errShort when b ends inside it).
func nextFrame(b []byte) (llmflow.Record, int, error) {
	if len(b) < frameHeader {
		return llmflow.Record{}, 0, errShort
	}
	n := binary.LittleEndian.Uint32(b)
	sum := binary.LittleEndian.Uint32(b[4:])
	if n == 0 || n > MaxFrame {
		return llmflow.Record{}, 0, fmt.Errorf("frame length %d out of range", n)
	}
	if uint64(len(b)-frameHeader) < uint64(n) {
		return llmflow.Record{}, 0, errShort
	}
	payload := b[frameHeader : frameHeader+int(n)]
	if crc32.Checksum(payload, castagnoli) != sum {
		return llmflow.Record{}, 0, errors.New("checksum mismatch")
	}
	r, err := decodePayload(payload)
	if err != nil {
		return llmflow.Record{}, 0, err
	}
	return r, frameHeader + int(n), nil
}

// decoder reads a payload's fields; the first error sticks.
type decoder struct {
	b       []byte
	err     error
	scratch [binary.MaxVarintLen64]byte
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("payload: bad %s", what)
	}
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n != len(binary.AppendVarint(d.scratch[:0], v)) { // one encoding per value

		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != len(binary.AppendUvarint(d.scratch[:0], v)) {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(what string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail(what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) u64(what string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// decodePayload decodes a version-1 payload; every byte must be used.
func decodePayload(b []byte) (llmflow.Record, error) {
	d := &decoder{b: b}
	var r llmflow.Record
	if v := d.byte1("version"); d.err == nil && v != payloadV1 {
		return r, fmt.Errorf("payload: unknown version %d", v)
	}
	sec := d.varint("time")
	nsec := d.uvarint("time")
	if d.err == nil && nsec >= 1e9 {
		d.fail("time")
	}
	r.Time = time.Unix(sec, int64(nsec)).UTC()
	if d.err == nil && r.Time.Unix() != sec { // beyond what a time.Time holds
		d.fail("time")
	}
	for _, p := range [...]*string{&r.RequestID, &r.KeyID, &r.Project, &r.Team, &r.Org, &r.Model, &r.Pool, &r.Upstream} {
		*p = d.str("string field")
	}
	r.PromptTokens = d.varint("prompt tokens")
	r.CompletionTokens = d.varint("completion tokens")
	r.CachedTokens = d.varint("cached tokens")
	r.GPUHours = math.Float64frombits(d.u64("gpu hours"))
	r.Status = int(d.varint("status"))
	r.Outcome = llmflow.Outcome(d.str("outcome"))
	flags := d.byte1("flags")
	if d.err == nil && flags&^(flagEstimated|flagStream) != 0 {
		d.fail("flags")
	}
	r.Estimated = flags&flagEstimated != 0
	r.Stream = flags&flagStream != 0
	r.EstimateReason = llmflow.EstimateReason(d.str("estimate reason"))
	r.Priority = int(d.varint("priority"))
	r.Latency = time.Duration(d.varint("latency"))
	r.TTFB = time.Duration(d.varint("ttfb"))
	nt := d.uvarint("tag count")
	if d.err == nil && nt > uint64(len(d.b)) { // each tag takes at least a byte
		d.fail("tag count")
	}
	if d.err == nil && nt > 0 {
		r.Tags = make([]string, 0, nt)
		for range nt {
			r.Tags = append(r.Tags, d.str("tag"))
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("length (trailing bytes)")
	}
	if d.err != nil {
		return llmflow.Record{}, d.err
	}
	return r, nil
}
