package refusal_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/supervaize/supervaizer-sidecar/refusal"
)

// TestRefusal: a refusal is found through wrapping (As, errors.Is by
// code), names itself by its code, JSON-RPC code or reason, audits as its
// Reason when set, and carries data.code unless it has data of its own.
func TestRefusal(t *testing.T) {
	r := &refusal.Refusal{RPCCode: -32030, Code: "workspace_authorization_expired",
		Message: "Workspace authorization token is expired", Detail: "exp in the past"}
	wrapped := fmt.Errorf("deciding: %w", r)
	if refusal.As(wrapped) != r {
		t.Fatal("As does not find a wrapped refusal")
	}
	if refusal.As(errors.New("plain")) != nil {
		t.Fatal("As found a refusal in a plain error")
	}
	if !errors.Is(wrapped, &refusal.Refusal{Code: r.Code}) || errors.Is(wrapped, &refusal.Refusal{Code: "other"}) {
		t.Fatal("errors.Is does not compare codes")
	}
	if errors.Is(wrapped, &refusal.Refusal{}) {
		t.Fatal("an empty code matched")
	}
	if got := r.Error(); got != "workspace_authorization_expired: Workspace authorization token is expired (exp in the past)" {
		t.Fatalf("Error() = %q", got)
	}
	if got := (&refusal.Refusal{RPCCode: -32600, Message: "Invalid Request"}).Error(); got != "jsonrpc -32600: Invalid Request" {
		t.Fatalf("Error() = %q", got)
	}
	if r.AuditCode() != r.Code {
		t.Fatalf("AuditCode %q", r.AuditCode())
	}
	busy := *r
	busy.Reason = "body_memory_workspace_share_full"
	if busy.AuditCode() != busy.Reason {
		t.Fatalf("AuditCode %q, want the reason", busy.AuditCode())
	}
	if got := r.JSONRPCData(); !reflect.DeepEqual(got, map[string]string{"code": r.Code}) {
		t.Fatalf("JSONRPCData %v", got)
	}
	own := &refusal.Refusal{Code: "c", Data: map[string]any{"code": "c", "retry_after": 3}}
	if got := own.JSONRPCData(); !reflect.DeepEqual(got, own.Data) {
		t.Fatalf("JSONRPCData %v", got)
	}
	if (&refusal.Refusal{RPCCode: -32700}).JSONRPCData() != nil {
		t.Fatal("a refusal without code or data has a data member")
	}
	cause := errors.New("redis down")
	withCause := &refusal.Refusal{Code: "idempotency_store_unavailable", Cause: cause}
	if !errors.Is(withCause, cause) {
		t.Fatal("the cause is not unwrapped")
	}
}
