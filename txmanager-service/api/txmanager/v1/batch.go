package v1

import kerrors "github.com/go-kratos/kratos/v2/errors"

// CreateResultOf is one create's answer as a batch carries it: its response, or its error
// as CreateTx would have returned it.
func CreateResultOf(resp *CreateTxResponse, err error) *CreateTxResult {
	if err != nil {
		se := kerrors.FromError(err)
		return &CreateTxResult{Result: &CreateTxResult_Error{Error: &CreateTxError{HttpStatus: se.Code, Reason: se.Reason, Message: se.Message, Metadata: se.Metadata}}}
	}
	return &CreateTxResult{Result: &CreateTxResult_Response{Response: resp}}
}

// AsError is the refusal as the API error CreateTx would have returned (IsInvalidArgument,
// IsInsufficientFunds, ... work on it).
func (x *CreateTxError) AsError() error {
	return kerrors.New(int(x.GetHttpStatus()), x.GetReason(), x.GetMessage()).WithMetadata(x.GetMetadata())
}
