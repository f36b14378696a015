package domain

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/ethereum/go-ethereum/common"
)

// checksumSlots is how many addresses the EIP-55 cache holds: a deployment's signers and
// its usual recipients, about 100 KB at most whatever the clients send.
const checksumSlots = 1024

// checksums remembers the EIP-55 form of recently parsed addresses. Every create parses a
// signer and a recipient, and the checksum is a Keccak-256 of the address each time (3% of
// the create path's CPU), while a hot signer and its recipients repeat request after
// request.
var checksums checksumCache

// checksumCache is a direct-mapped cache: an address has one slot, chosen by its last
// bytes (uniform for addresses, which are hash outputs); a colliding address replaces it.
// An entry is only ever used for the very address it was computed from.
type checksumCache struct {
	slots [checksumSlots]atomic.Pointer[checksumEntry]
}

type checksumEntry struct {
	addr common.Address
	hex  string
}

// hex is addr.Hex(), computed once per slot occupancy.
func (c *checksumCache) hex(addr common.Address) string {
	slot := &c.slots[binary.BigEndian.Uint32(addr[common.AddressLength-4:])%checksumSlots]
	if e := slot.Load(); e != nil && e.addr == addr {
		return e.hex
	}
	checksummed := addr.Hex()
	slot.Store(&checksumEntry{addr: addr, hex: checksummed})
	return checksummed
}
