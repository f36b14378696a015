package services

import (
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

func parseTxID(id string) (uuid.UUID, error) {
	if len(id) != 36 {
		return uuid.UUID{}, &domain.ValidationError{Field: "txId", Reason: "must be a UUID"}
	}
	parsed, err := uuid.Parse(id)
	if err != nil {
		return uuid.UUID{}, &domain.ValidationError{Field: "txId", Reason: "must be a UUID"}
	}
	return parsed, nil
}
