// Package catalog turns OpenAPI 3 documents into callable actions: the
// broker's action catalog (GET /code/actions) and the tools behind it.
//
// A Catalog is built from named sources. Each source's document is fetched
// (http, https or a local file) when the catalog starts and again at every
// poll; every operation becomes a CatalogAction named <service>_<operation>
// whose inputSchema merges the operation's path, query, header and cookie
// parameters with its request body (under the `body` property). Call makes the
// HTTP request an action describes and returns the response as JSON.
//
// A poll that fails (network, status, parse) keeps the last good actions of
// that source and is logged. The catalog version is a hash over each service's
// sorted action names, so it changes exactly when an action is added or
// removed, and not when a document is merely reformatted.
//
// The package parses documents with github.com/getkin/kin-openapi and has no
// Caddy dependency.
package catalog
