package services

// SubmitNotifier is told when a signer has newly allocated transactions, so signing and
// broadcasting start at once instead of at the next scheduled pass, and when a signer was
// found quarantined, so reconciliation with the chain starts at once too.
type SubmitNotifier interface {
	NotifyAllocated(signer string)
	NotifyQuarantined(signer string)
}
