// Package pipeline is what the chain pipeline's stages share: signed attempts and their
// kinds, signing for the chain, and broadcasting with each answer's outcome recorded
// (fenced). The stages each live in a package of their own below it, with their own store
// port, repository and queries:
//
//   - submitting: sign and send what was allocated; rebroadcast and re-price what is due.
//   - receipts: find receipts, follow them through reorgs to a final state.
//   - stuck: a head of line that does not move, and the hook that decides about it.
//   - reconcile: the database and the chain told apart and made to agree (a chain ahead of
//     the database, nonces taken by transactions without an attempt, nonce holes).
//
// What a node's answer means is services.OutcomeOf, one table. The workers decide when a
// stage runs; the repositories implement the stores. This package and the stages import
// services and domain; services never imports them.
package pipeline
