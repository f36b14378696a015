package services

// SubmitNotifier is told when a signer has newly allocated transactions, so signing and
// broadcasting start at once instead of at the next scheduled pass.
type SubmitNotifier interface {
	NotifyAllocated(signer string)
}
