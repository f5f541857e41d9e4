package metatools

import (
	"encoding/json"
	"strconv"

	"github.com/codemode-gateway/caddy-codemode/broker"
)

// The JSON Schemas of the four meta-tools, as listed by tools/list. The
// meta-tools validate their inputs themselves (VALIDATION_ERROR naming the
// field). No schema has anyOf/oneOf/allOf at its root: several model APIs
// reject that in tool parameters, so "queries or query" is enforced by
// meta:search rather than declared.
var (
	searchInputSchema = json.RawMessage(`{
  "type": "object",
  "description": "Find tools by natural-language query. Give queries (or the earlier single query); one of the two is required.",
  "properties": {
    "queries": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 1000}, "minItems": 1, "maxItems": 20,
      "description": "Natural-language queries, e.g. [\"create a github issue\"]; each returns up to topK tools."},
    "query": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Earlier contract: a single query (merged into queries)."},
    "topK": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10, "description": "Maximum results per query."},
    "appIds": {"type": "array", "items": {"type": "string"}, "maxItems": 1000, "description": "Only tools of these apps."},
    "excludeToolNames": {"type": "array", "items": {"type": "string"}, "maxItems": 1000, "description": "Tools to leave out."},
    "minRelevanceScore": {"type": "number", "minimum": 0, "maximum": 1, "description": "Drop results scoring below this (0..1)."},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 1000, "description": "Only tools with one of these tags (case-insensitive)."},
    "readOnly": {"type": "boolean", "description": "Only tools whose readOnlyHint is this (undeclared counts as false)."},
    "destructive": {"type": "boolean", "description": "Only tools whose destructiveHint is this (undeclared counts as true unless read-only)."},
    "filter": {"type": "object", "properties": {"appIds": {"type": "array", "items": {"type": "string"}, "maxItems": 1000},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 1000}, "readOnly": {"type": "boolean"}, "destructive": {"type": "boolean"}},
      "description": "Earlier contract: filter.appIds (merged into appIds); also takes tags, readOnly, destructive."}
  }
}`)

	searchOutputSchema = json.RawMessage(`{
  "type": "object",
  "required": ["tools", "totalAvailableTools", "warnings"],
  "properties": {
    "tools": {"type": "array", "items": {"type": "object",
      "required": ["name", "appId", "description", "relevanceScore"],
      "properties": {
        "name": {"type": "string"},
        "appId": {"type": "string", "description": "The tool's service."},
        "description": {"type": "string", "maxLength": 160, "description": "One-line summary; describe has the rest."},
        "relevanceScore": {"type": "number", "minimum": 0, "maximum": 1},
        "matchedQueries": {"type": "array", "items": {"type": "string"}, "description": "Given when the call had several queries."}
      }}},
    "totalAvailableTools": {"type": "integer", "minimum": 0},
    "warnings": {"type": "array", "items": {"type": "object", "required": ["type", "message"],
      "properties": {
        "type": {"type": "string", "enum": ["excluded_tool_not_found", "no_results", "low_relevance"]},
        "message": {"type": "string"},
        "affectedTools": {"type": "array", "items": {"type": "string"}}
      }}}
  }
}`)

	describeInputSchema = json.RawMessage(`{
  "type": "object",
  "required": ["toolNames"],
  "properties": {
    "toolNames": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 50,
      "description": "Names of tools to describe, as returned by search."},
    "detail": {"type": "string", "enum": ["compact", "full"], "default": "compact",
      "description": "compact: a TypeScript signature (complete input, trimmed output) and one example; full: also the JSON Schemas, the whole description and up to 5 examples."}
  }
}`)

	describeOutputSchema = json.RawMessage(`{
  "type": "object",
  "required": ["tools"],
  "properties": {
    "tools": {"type": "array", "items": {"type": "object",
      "required": ["name", "appId", "description", "signature", "annotations", "usageExamples"],
      "properties": {
        "name": {"type": "string"},
        "appId": {"type": "string"},
        "description": {"type": "string"},
        "signature": {"type": "string", "description": "TypeScript declaration of the tool's input and output."},
        "signatureComplete": {"type": "boolean", "description": "false when the signature had to cut the input's nesting (ask for detail full)."},
        "inputSchema": {"type": "object", "description": "detail full only."},
        "outputSchema": {"anyOf": [{"type": "object"}, {"type": "boolean"}, {"type": "null"}], "description": "detail full only."},
        "deprecated": {"type": "boolean"},
        "annotations": {"type": "object", "required": ["readOnlyHint"], "properties": {
          "title": {"type": "string"},
          "readOnlyHint": {"type": "boolean"},
          "destructiveHint": {"type": "boolean"},
          "idempotentHint": {"type": "boolean"},
          "openWorldHint": {"type": "boolean"}
        }},
        "usageExamples": {"type": "array", "maxItems": 5, "items": {"type": "object", "required": ["description", "code"],
          "properties": {"description": {"type": "string"}, "code": {"type": "string"}}}}
      }}},
    "notFound": {"type": "array", "items": {"type": "string"}}
  }
}`)

	executeOutputSchema = json.RawMessage(`{
  "type": "object",
  "required": ["status"],
  "properties": {
    "status": {"type": "string", "enum": ["ok", "syntax_error", "illegal_access", "runtime_error", "tool_error", "timeout"]},
    "result": {"anyOf": [{"type": "object"}, {"type": "array"}, {"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}],
      "description": "The script's return value (status ok): any JSON value."},
    "logs": {"type": "array", "items": {"type": "string"}},
    "error": {"type": "object", "required": ["message"], "properties": {
      "code": {"type": "string"},
      "message": {"type": "string"},
      "kind": {"type": "string"},
      "name": {"type": "string"},
      "source": {"type": "string", "enum": ["script", "tool"]},
      "toolName": {"type": "string"},
      "location": {"type": "object", "properties": {"line": {"type": "integer"}, "column": {"type": "integer"}}},
      "stack": {"type": "string"}
    }}
  }
}`)

	invokeInputSchema = json.RawMessage(`{
  "type": "object",
  "required": ["tool", "input"],
  "properties": {
    "tool": {"type": "string", "minLength": 1, "description": "The tool to call, as returned by search."},
    "input": {"type": "object", "description": "The tool's arguments; validated against its input schema."}
  }
}`)
)

// executeInputSchema is meta:execute's input schema for scripts of at most
// maxScript bytes (Service.ScriptLimit), so that the limit a model reads
// is the one the service and its engine enforce. maxLength counts
// characters: a script of ASCII has as many as bytes, and one whose
// characters take more bytes is answered with the limit in bytes.
func executeInputSchema(maxScript int) json.RawMessage {
	return json.RawMessage(`{
  "type": "object",
  "required": ["script"],
  "properties": {
    "script": {"type": "string", "minLength": 1, "maxLength": ` + strconv.Itoa(maxScript) + `,
      "description": "JavaScript: the body of an async function. Use await callTool(name, input, {throwOnError}), await searchTools(query, options), await describeTool(name), getTool(name), metaContext, __safe_parallel(fns, {maxConcurrency}) and, when enabled, console. Return the result."},
    "allowedTools": {"type": "array", "items": {"type": "string"}, "maxItems": ` + strconv.Itoa(broker.MaxAllowedTools) + `, "description": "Whitelist of tool names the script may call."},
    "context": {"type": "object", "description": "Earlier contract: read-only object exposed to the script as metaContext."}
  }
}`)
}
