package submitting

import (
	"sync"
	"time"
)

// rescanEvery bounds how long an ALLOCATED row below a signer's frontier can wait: one
// written there by another path than allocation (a placeholder filling a nonce hole is the
// one known) that no Rescan announced.
const rescanEvery = 5 * time.Second

// unsignedFrontiers keeps, per signer, a nonce below which the signer has nothing left to
// sign, so a pass reads only the rows above it.
//
// Why it is safe: allocation writes a signer's rows in increasing nonces at or above its
// cursor, one batch after another under the lease, and this stage signs them lowest first;
// so once the rows up to nonce n are stored signed, every ALLOCATED row of the signer is
// above n. Anything else that writes an ALLOCATED row (placeholders, which go below) calls
// Rescan, and a scan of every open row from nonce 0 runs anyway after a new lease epoch
// (another owner may have signed or allocated meanwhile), on a new database server (a
// failover may have lost the last signings, whose rows are ALLOCATED again there) and
// every rescanEvery.
//
// It also knows when a pass has nothing to read at all (allSigned). Every pass of the
// submit loop visits every signer this node holds, and the loop is woken by every writer
// commit, each of which allocated for a few of them: in bench-chain (20 signers, 4 writer
// workers) two reads of three found nothing. Allocation under this node's lease happens
// only here, and each commit tells this stage the cursor it left (allocated); the cursor read
// before a scan covers what came before. Once the signer's rows are signed up to both, the
// next ALLOCATED row can only come from an allocation still to be announced (or from a
// path that calls Rescan, or one only the periodic scan finds, as above).
type unsignedFrontiers struct {
	mu       sync.Mutex
	bySigner map[string]unsignedFrontier
	// allocatedBelow is, per signer, the cursor this node's last allocation committed and
	// the lease token it held: kept apart from the frontier, so an allocation announced
	// while a scan is under way (before it records its frontier) is not lost.
	allocatedBelow map[string]allocationNotice
}

type allocationNotice struct {
	token, next uint64
}

// frontierEpoch is what a frontier holds for: one lease epoch on one database server.
type frontierEpoch struct {
	signer string
	token  uint64 // the lease's fencing token
	server uint64 // the database server epoch (services.DatabaseServerEpoch)
}

type unsignedFrontier struct {
	epoch     frontierEpoch
	next      uint64    // no ALLOCATED row of the signer is below it
	scannedAt time.Time // the last scan from nonce 0
	cursor    uint64    // the nonce cursor read before that scan
}

// from is the nonce a pass lists the signer's ALLOCATED rows from, and whether that is a
// scan of every open row (then the pass reports it through scanned).
func (f *unsignedFrontiers) from(at frontierEpoch, now time.Time) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.current(at, now)
	if !ok {
		return 0, true
	}
	return u.next, false
}

// current is the signer's frontier when it holds for at and no scan from nonce 0 is due;
// f.mu held.
func (f *unsignedFrontiers) current(at frontierEpoch, now time.Time) (unsignedFrontier, bool) {
	u, ok := f.bySigner[at.signer]
	if !ok || u.epoch != at || now.Sub(u.scannedAt) >= rescanEvery {
		return unsignedFrontier{}, false
	}
	return u, true
}

// scanned records a scan from nonce 0 that found found (lowest first, at most a batch),
// with the signer's nonce cursor read before it: with nothing found, nothing ALLOCATED is
// below the cursor.
func (f *unsignedFrontiers) scanned(at frontierEpoch, now time.Time, found []AllocatedTx, cursor uint64) {
	next := cursor
	if len(found) > 0 {
		next = found[0].Nonce
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bySigner == nil {
		f.bySigner = map[string]unsignedFrontier{}
	}
	f.bySigner[at.signer] = unsignedFrontier{epoch: at, next: next, scannedAt: now, cursor: cursor}
}

// allocated records that this node committed the signer's allocations below next under the
// lease token.
func (f *unsignedFrontiers) allocated(signer string, token, next uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.allocatedBelow == nil {
		f.allocatedBelow = map[string]allocationNotice{}
	}
	// Tokens only grow: a notice from an older lease epoch arriving late changes nothing.
	if n, ok := f.allocatedBelow[signer]; !ok || token > n.token || (token == n.token && next > n.next) {
		f.allocatedBelow[signer] = allocationNotice{token: token, next: next}
	}
}

// allSigned says the signer has nothing to sign for a pass at now: its rows are signed up to
// the cursor read before the last scan and up to the last allocation announced in the same
// lease epoch, and no scan from nonce 0 is due.
func (f *unsignedFrontiers) allSigned(at frontierEpoch, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.current(at, now)
	if !ok {
		return false
	}
	allocatedBelow := u.cursor
	if n, ok := f.allocatedBelow[at.signer]; ok && n.token == at.token {
		allocatedBelow = max(allocatedBelow, n.next)
	}
	return u.next >= allocatedBelow
}

// signedThrough records that the signer's ALLOCATED rows up to nonce are stored signed.
func (f *unsignedFrontiers) signedThrough(at frontierEpoch, nonce uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.bySigner[at.signer]
	if !ok || u.epoch != at || nonce < u.next {
		return
	}
	u.next = nonce + 1
	f.bySigner[at.signer] = u
}

// rescan makes the signer's next pass scan every open row.
func (f *unsignedFrontiers) rescan(signer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.bySigner, signer)
}
