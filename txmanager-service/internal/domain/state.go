package domain

// State is where a managed transaction is in its life (docs/design.md#states).
type State string

const (
	// StateAllocated: a nonce is assigned and persisted; nothing broadcast yet.
	StateAllocated State = "ALLOCATED"
	// StateTracking: signed and broadcast; waiting for a receipt and finality.
	StateTracking State = "TRACKING"
	// StateConfirmed: mined with status 1 and final.
	StateConfirmed State = "CONFIRMED"
	// StateFailedFinal: mined with status 0 and final.
	StateFailedFinal State = "FAILED_FINAL"
	// StateStuck: head-of-line and not progressing; alerting, awaiting resolution. A stuck
	// transaction that later gets a receipt still proceeds to its final state.
	StateStuck State = "STUCK"
)

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case StateAllocated, StateTracking, StateConfirmed, StateFailedFinal, StateStuck:
		return true
	}
	return false
}

// Final reports whether no further transition can happen.
// An intent that never got a nonce ends EXPIRED, REJECTED or REFUSED.
func (s State) Final() bool {
	switch s {
	case StateConfirmed, StateFailedFinal, StateExpired, StateRejected, StateRefused:
		return true
	}
	return false
}

// transitions lists the allowed moves. TRACKING -> TRACKING covers resubmission and a reorg
// putting a mined transaction back to be looked up again.
var transitions = map[State][]State{
	StateAllocated: {StateTracking, StateStuck},
	StateTracking:  {StateTracking, StateConfirmed, StateFailedFinal, StateStuck},
	StateStuck:     {StateTracking, StateConfirmed, StateFailedFinal, StateStuck},
}

// CanTransition reports whether a transaction may move from one state to another.
func CanTransition(from, to State) bool {
	for _, allowed := range transitions[from] {
		if allowed == to {
			return true
		}
	}
	return false
}
