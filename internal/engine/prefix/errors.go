package prefix

import "errors"

var (
	// ErrBadOptions reports invalid Options or NewHasher arguments.
	ErrBadOptions = errors.New("prefix: bad options")
	// ErrBadMeta reports a Meta that Put refuses (inconsistent fields).
	ErrBadMeta = errors.New("prefix: bad entry metadata")
	// ErrNotFound reports a key that no tier holds.
	ErrNotFound = errors.New("prefix: entry not found")
	// ErrCorrupt reports an entry that failed validation: a bad header,
	// another fingerprint, an older format, a wrong length or a payload
	// checksum mismatch. The entry has been removed; whatever was read
	// from it must be discarded.
	ErrCorrupt = errors.New("prefix: corrupt cache entry")
	// ErrIncomplete is returned by Reader.Close when the payload was not
	// read to its end, so its checksum was never verified.
	ErrIncomplete = errors.New("prefix: payload not read to the end, not verified")
	// ErrClosed reports a call on a closed Store.
	ErrClosed = errors.New("prefix: store closed")
)
