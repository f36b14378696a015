package main

import (
	"slices"
	"testing"

	"gopkg.in/yaml.v3"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// A gnostic document reduced to what the rules act on.
const generated = `
openapi: 3.0.3
info: {title: "", version: 0.0.1}
paths:
  /api/v1/tx:
    post:
      operationId: TxService_CreateTx
      requestBody: {content: {application/json: {schema: {$ref: '#/components/schemas/CreateTxRequest'}}}}
      responses:
        "200": {description: OK, content: {application/json: {schema: {$ref: '#/components/schemas/CreateTxResponse'}}}}
  /api/v1/tx/{txId}:
    get:
      operationId: TxService_GetTx
      responses:
        "200": {description: OK, content: {application/json: {schema: {$ref: '#/components/schemas/Tx'}}}}
components:
  schemas:
    CreateTxRequest:
      type: object
      properties: {signer: {type: string}}
    CreateTxResponse:
      type: object
      properties:
        tx: {$ref: '#/components/schemas/Tx'}
        created: {type: boolean}
    Tx:
      type: object
      properties:
        txId: {type: string}
        receipt:
          allOf: [{$ref: '#/components/schemas/Receipt'}]
          description: " the receipt\n once mined"
        createdAt: {type: string, format: date-time}
        attempts: {type: array, items: {type: string}}
    Receipt:
      type: object
      properties: {status: {type: string}}
`

// The rules each leave their mark: errors on every operation, 202 on the create, nullable
// messages and timestamps, required fields on response schemas only, the reasons.
func TestFinishAppliesEveryRule(t *testing.T) {
	out, err := finish([]byte(generated))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]map[string]any `yaml:"responses"`
		} `yaml:"paths"`
		Components struct {
			Schemas map[string]struct {
				Required   []string                  `yaml:"required"`
				Properties map[string]map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
			SecuritySchemes map[string]any `yaml:"securitySchemes"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	schemas := doc.Components.Schemas
	errorReasons := schemas["Error"].Properties["reason"]["enum"].([]any)
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"create answers 202 too", doc.Paths["/api/v1/tx"]["post"].Responses["202"] != nil, true},
		{"every operation answers the error body", doc.Paths["/api/v1/tx/{txId}"]["get"].Responses["default"]["$ref"], "#/components/responses/Error"},
		{"a message field may be null", schemas["Tx"].Properties["receipt"]["nullable"], true},
		{"a bare message reference may be null", schemas["CreateTxResponse"].Properties["tx"]["nullable"], true},
		{"a timestamp may be null", schemas["Tx"].Properties["createdAt"]["nullable"], true},
		{"a list is never null", schemas["Tx"].Properties["attempts"]["nullable"], nil},
		{"a response schema requires every field", schemas["Tx"].Required, []string{"txId", "receipt", "createdAt", "attempts"}},
		{"a schema only a response reaches requires its fields", schemas["Receipt"].Required, []string{"status"}},
		{"a request schema requires nothing", schemas["CreateTxRequest"].Required, []string(nil)},
		{"descriptions lose protoc's leading spaces", schemas["Tx"].Properties["receipt"]["description"], "the receipt\nonce mined"},
		{"every reason but the zero value", len(errorReasons), len(v1.ErrorReason_name) - 1},
		{"credentials", len(doc.Components.SecuritySchemes), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := tt.got, tt.want; !equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

func equal(a, b any) bool {
	as, aok := a.([]string)
	bs, bok := b.([]string)
	if aok || bok {
		return slices.Equal(as, bs)
	}
	return a == b
}
