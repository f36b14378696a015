package v1

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// reasonsOf is every ErrorReason but the zero value, from the proto's descriptor.
func reasonsOf(t *testing.T) []protoreflect.EnumValueDescriptor {
	t.Helper()
	values := ErrorReason(0).Descriptor().Values()
	var out []protoreflect.EnumValueDescriptor
	for i := range values.Len() {
		if values.Get(i).Number() != 0 {
			out = append(out, values.Get(i))
		}
	}
	if len(out) == 0 {
		t.Fatal("ErrorReason has no values")
	}
	return out
}

// helperName is the Kratos name of a reason's helpers: NOT_LEADER -> NotLeader.
func helperName(reason protoreflect.EnumValueDescriptor) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.ToLower(string(reason.Name())), "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// Every ErrorReason has IsX(err error) bool and ErrorX(format string, args ...any)
// *errors.Error in this package's source: a reason added to the proto without
// regenerating fails here.
func TestEveryErrorReasonHasItsHelpers(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	signatures := map[string]string{}
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), ".go") || strings.HasSuffix(entry.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), entry.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				signatures[fn.Name.Name] = signature(fn.Type)
			}
		}
	}
	for _, reason := range reasonsOf(t) {
		name := helperName(reason)
		want := map[string]string{
			"Is" + name:    "(err error) bool",
			"Error" + name: "(format string, args ...any) *errors.Error",
		}
		for fn, sig := range want {
			if got, ok := signatures[fn]; !ok || got != sig {
				t.Errorf("ErrorReason %s: func %s%s missing (found %q): run make generate", reason.Name(), fn, sig, got)
			}
		}
	}
}

// signature prints a function type as it reads in source, for the comparison above.
func signature(ft *ast.FuncType) string {
	field := func(list *ast.FieldList) []string {
		var out []string
		if list == nil {
			return out
		}
		for _, f := range list.List {
			typ := exprString(f.Type)
			if len(f.Names) == 0 {
				out = append(out, typ)
			}
			for _, n := range f.Names {
				out = append(out, n.Name+" "+typ)
			}
		}
		return out
	}
	s := "(" + strings.Join(field(ft.Params), ", ") + ")"
	if results := field(ft.Results); len(results) > 0 {
		s += " " + strings.Join(results, ", ")
	}
	return s
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.Ellipsis:
		return "..." + exprString(e.Elt)
	}
	return fmt.Sprintf("%T", e)
}

// The helpers of every reason: ErrorX answers the reason with its (errors.code) status,
// and IsX recognises it, wrapped or after a trip through gRPC, and nothing else.
func TestErrorReasonHelpersRecogniseTheirReason(t *testing.T) {
	helpers := map[ErrorReason]struct {
		is  func(error) bool
		new func(string, ...any) *kerrors.Error
	}{
		ErrorReason_NOT_LEADER:             {IsNotLeader, ErrorNotLeader},
		ErrorReason_FENCED:                 {IsFenced, ErrorFenced},
		ErrorReason_IDEMPOTENCY_CONFLICT:   {IsIdempotencyConflict, ErrorIdempotencyConflict},
		ErrorReason_INVALID_ARGUMENT:       {IsInvalidArgument, ErrorInvalidArgument},
		ErrorReason_NOT_FOUND:              {IsNotFound, ErrorNotFound},
		ErrorReason_UNAVAILABLE:            {IsUnavailable, ErrorUnavailable},
		ErrorReason_UNKNOWN_SIGNER:         {IsUnknownSigner, ErrorUnknownSigner},
		ErrorReason_INTENT_REVERTS:         {IsIntentReverts, ErrorIntentReverts},
		ErrorReason_REQUEST_TOO_LARGE:      {IsRequestTooLarge, ErrorRequestTooLarge},
		ErrorReason_UNAUTHENTICATED:        {IsUnauthenticated, ErrorUnauthenticated},
		ErrorReason_PERMISSION_DENIED:      {IsPermissionDenied, ErrorPermissionDenied},
		ErrorReason_INTERNAL:               {IsInternal, ErrorInternal},
		ErrorReason_METHOD_NOT_ALLOWED:     {IsMethodNotAllowed, ErrorMethodNotAllowed},
		ErrorReason_UNSUPPORTED_MEDIA_TYPE: {IsUnsupportedMediaType, ErrorUnsupportedMediaType},
		ErrorReason_RATE_LIMITED:           {IsRateLimited, ErrorRateLimited},
		ErrorReason_INSUFFICIENT_FUNDS:     {IsInsufficientFunds, ErrorInsufficientFunds},
		ErrorReason_CURSOR_EXPIRED:         {IsCursorExpired, ErrorCursorExpired},
		ErrorReason_OUTCOME_UNKNOWN:        {IsOutcomeUnknown, ErrorOutcomeUnknown},
		ErrorReason_SIGNER_QUARANTINED:     {IsSignerQuarantined, ErrorSignerQuarantined},
		ErrorReason_SIGNER_RETIRED:         {IsSignerRetired, ErrorSignerRetired},
		ErrorReason_SIGNER_UNAVAILABLE:     {IsSignerUnavailable, ErrorSignerUnavailable},
		ErrorReason_SIGNER_PAUSED:          {IsSignerPaused, ErrorSignerPaused},
		ErrorReason_POLICY_DENIED:          {IsPolicyDenied, ErrorPolicyDenied},
		ErrorReason_APPROVAL_FORBIDDEN:     {IsApprovalForbidden, ErrorApprovalForbidden},
		ErrorReason_APPROVAL_CLOSED:        {IsApprovalClosed, ErrorApprovalClosed},
		ErrorReason_ALREADY_DECIDED:        {IsAlreadyDecided, ErrorAlreadyDecided},
		ErrorReason_SIGNER_ACTIVE:          {IsSignerActive, ErrorSignerActive},
	}
	reasons := reasonsOf(t)
	for _, reason := range reasons {
		t.Run(string(reason.Name()), func(t *testing.T) {
			h, ok := helpers[ErrorReason(reason.Number())]
			if !ok {
				t.Fatalf("no helpers listed for %s: add IsX and ErrorX to this table", reason.Name())
			}
			if !proto.HasExtension(reason.Options(), kerrors.E_Code) {
				t.Fatalf("%s has no (errors.code) in error_reason.proto", reason.Name())
			}
			code := proto.GetExtension(reason.Options(), kerrors.E_Code).(int32)
			err := h.new("signer %s: %d", "0xabc", 7)
			if err.Reason != string(reason.Name()) || err.Code != code || err.Message != "signer 0xabc: 7" {
				t.Fatalf("constructor gave %d %s %q, want %d %s", err.Code, err.Reason, err.Message, code, reason.Name())
			}
			throughGRPC := kerrors.FromError(err.GRPCStatus().Err())
			for name, candidate := range map[string]error{"as made": err, "wrapped": fmt.Errorf("create: %w", err), "through gRPC": throughGRPC} {
				if !h.is(candidate) {
					t.Errorf("Is%s does not recognise its error %s", helperName(reason), name)
				}
			}
			if h.is(nil) || h.is(fmt.Errorf("plain")) {
				t.Errorf("Is%s recognises nil or an error without a reason", helperName(reason))
			}
			for _, other := range reasons {
				if other.Number() != reason.Number() && h.is(helpers[ErrorReason(other.Number())].new("x")) {
					t.Errorf("Is%s recognises %s", helperName(reason), other.Name())
				}
			}
		})
	}
	if len(helpers) != len(reasons) {
		t.Fatalf("the table lists %d reasons, the proto has %d", len(helpers), len(reasons))
	}
}
