package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kforge/kforge/inventory"
)

// CRD is the KforgeCluster CustomResourceDefinition. Its spec's schema is the inventory's JSON
// Schema (inventory.Schema: the same Go types and doc comments), made structural: references
// inlined, apiVersion, kind and name left to the object, the controller's own fields added.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	raw, err := inventory.Schema()
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	defs, _ := doc["$defs"].(map[string]any)
	spec, err := structural(doc, defs, nil)
	if err != nil {
		return nil, err
	}
	props := spec["properties"].(map[string]any)
	for _, f := range inventoryHead {
		delete(props, f)
	}
	spec["required"] = slices.DeleteFunc(spec["required"].([]any), func(r any) bool { return slices.Contains(inventoryHead, r.(string)) })
	props["credentialsFrom"] = map[string]any{
		"type":        "array",
		"description": "Secrets in the object's namespace whose keys the inventory refers to: each key is a file beside the inventory (ssh.identityFile: id_ed25519) and an environment variable (ssh.sudoPasswordEnv: SUDO_PASSWORD).",
		"items": map[string]any{"type": "object", "required": []any{"name"},
			"properties": map[string]any{"name": map[string]any{"type": "string", "description": "The Secret's name."}}},
	}
	props["deletionPolicy"] = map[string]any{"type": "string", "enum": []any{DeletionRetain, DeletionReset},
		"description": "What deleting the object does to the hosts: Retain (the default) leaves them as they are; Reset resets them first (kforge reset)."}
	props["prune"] = map[string]any{"type": "boolean",
		"description": "Remove the hosts that left the inventory (kforge apply --prune): drained, a master's etcd member removed, reset, the node deleted."}
	props["acceptNewHostKeys"] = map[string]any{"type": "boolean",
		"description": "Trust a host whose SSH key is not yet known and record it in the cluster's state (kforge apply --accept-new-host-keys), unless the inventory pins it (hostKey)."}
	spec["description"] = "The cluster's inventory (kforge.yaml without apiVersion, kind and name), and where its credentials are."

	var specSchema apiextensionsv1.JSONSchemaProps
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &specSchema); err != nil {
		return nil, fmt.Errorf("the inventory's schema as a CRD's: %w", err)
	}
	status := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true),
		Description: "What the controller last saw and did: observedGeneration, the conditions Ready, Progressing and Degraded, the version, the nodes, the last plan and run."}
	printer := func(name, typ, path string) apiextensionsv1.CustomResourceColumnDefinition {
		return apiextensionsv1.CustomResourceColumnDefinition{Name: name, Type: typ, JSONPath: path}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: Resource + "." + Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: Resource, Singular: strings.ToLower(Kind), Kind: Kind, ListKind: Kind + "List", ShortNames: []string{"kfc"}},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Required: []string{"spec"},
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": specSchema, "status": status},
				}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					printer("Version", "string", ".status.version"),
					printer("Nodes", "integer", ".status.nodes"),
					printer("Ready", "string", `.status.conditions[?(@.type=="Ready")].status`),
					printer("Plan", "string", ".status.lastPlan"),
					printer("Age", "date", ".metadata.creationTimestamp"),
				},
			}},
		},
	}, nil
}

// schemaKeys are the JSON Schema keywords a CRD's structural schema keeps.
var schemaKeys = []string{"type", "description", "properties", "items", "required", "enum", "minimum", "maximum",
	"minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "additionalProperties"}

// structural turns one JSON Schema node into a structural schema's: $ref inlined from defs,
// only schemaKeys kept, additionalProperties only as a schema (a map's values).
func structural(node, defs map[string]any, seen []string) (map[string]any, error) {
	if ref, ok := node["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		def, ok := defs[name].(map[string]any)
		if !ok || slices.Contains(seen, name) {
			return nil, fmt.Errorf("inventory schema: reference %s cannot be inlined", ref)
		}
		out, err := structural(def, defs, append(seen, name))
		if err != nil {
			return nil, err
		}
		if d, ok := node["description"]; ok {
			out["description"] = d // the field's own words over its type's
		}
		return out, nil
	}
	out := map[string]any{}
	for _, k := range schemaKeys {
		v, ok := node[k]
		if !ok {
			continue
		}
		switch k {
		case "properties":
			props := map[string]any{}
			for name, p := range v.(map[string]any) {
				s, err := structural(p.(map[string]any), defs, seen)
				if err != nil {
					return nil, err
				}
				props[name] = s
			}
			out[k] = props
		case "items":
			s, err := structural(v.(map[string]any), defs, seen)
			if err != nil {
				return nil, err
			}
			out[k] = s
		case "additionalProperties":
			if m, ok := v.(map[string]any); ok {
				s, err := structural(m, defs, seen)
				if err != nil {
					return nil, err
				}
				out[k] = s
			}
		default:
			out[k] = v
		}
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }
