package services

import "github.com/bionicotaku/txmanager-service/internal/domain"

// SubmitNotifier is told when a signer has newly allocated transactions (under lease, every
// one below next), so signing and broadcasting start at once instead of at the next
// scheduled pass, and when a signer was found quarantined, so reconciliation with the chain
// starts at once too.
type SubmitNotifier interface {
	NotifyAllocated(lease domain.Lease, next uint64)
	NotifyQuarantined(signer string)
}
