"""Chunk boundaries per language on real snippets."""

from __future__ import annotations

import pytest

from memory.indexing.chunking import MAX_CHUNK_CHARS, ChunkSpan, chunk_text


def spans(text: str, language: str) -> list[tuple[str, str, int, int]]:
    return [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunk_text(text, language)]


def test_python_functions_classes_decorators() -> None:
    src = '''import os


@cache
def load(path: str) -> bytes:
    """Read a file."""
    with open(path, "rb") as fh:
        return fh.read()


class Store(Base):
    """Keeps things."""

    def get(self, key):
        return self.items[key]
'''
    assert spans(src, "python") == [
        ("function", "load", 4, 8),  # the decorator belongs to the function
        ("class", "Store", 11, 15),
    ]
    load = chunk_text(src, "python")[0]
    assert load.text.startswith("@cache") and load.signature == "def load(path: str) -> bytes:"


def test_python_big_class_splits_into_header_and_methods() -> None:
    methods = "\n".join(
        f"    def method_{i}(self, value):\n" + "        value = value * 2 + 1\n" * 10 + "        return value\n"
        for i in range(12)
    )
    src = f'class Engine(object):\n    """A big class."""\n\n    speed = 3\n\n{methods}'
    chunks = chunk_text(src, "python")
    assert len(src) > MAX_CHUNK_CHARS
    assert chunks[0].kind == "header" and chunks[0].start_line == 1 and "speed = 3" in chunks[0].text
    methods_found = [c for c in chunks if c.kind == "method"]
    assert [c.symbol for c in methods_found] == [f"Engine.method_{i}" for i in range(12)]
    assert all(c.signature.startswith("class Engine(object): :: def method_") for c in methods_found)
    assert methods_found[0].start_line == 6 and methods_found[0].end_line == 17
    # No line is covered twice (no duplicate header/gap chunks).
    lines = [n for c in chunks for n in range(c.start_line, c.end_line + 1)]
    assert len(lines) == len(set(lines))


def test_long_function_is_windowed_with_its_signature() -> None:
    body = "".join(f"    total += compute_step({i}, total)\n" for i in range(200))
    src = f"def giant(n):\n    total = 0\n{body}    return total\n"
    chunks = chunk_text(src, "python")
    assert len(chunks) > 1 and all(c.kind == "part" and c.symbol == "giant" for c in chunks)
    assert all(c.signature == "def giant(n):" for c in chunks)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == src.count("\n")
    assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)


def test_typescript() -> None:
    src = """import { x } from "y";
export function add(a: number, b: number): number {
  return a + b;
}
export const mul = (a: number, b: number): number => a * b;
interface Shape { area(): number; }
export class Circle implements Shape {
  constructor(private r: number) {}
  area(): number { return Math.PI * this.r ** 2; }
}
type Id = string | number;
"""
    assert spans(src, "typescript") == [
        ("function", "add", 2, 4),
        ("function", "mul", 5, 5),
        ("class", "Shape", 6, 6),
        ("class", "Circle", 7, 10),
        ("type", "Id", 11, 11),
    ]


def test_javascript() -> None:
    src = """const fs = require("fs");
function readLines(path) {
  return fs.readFileSync(path, "utf8").split("\\n");
}
class Cache {
  get(k) { return this.m[k]; }
}
"""
    assert spans(src, "javascript") == [("function", "readLines", 2, 4), ("class", "Cache", 5, 7)]


def test_go() -> None:
    src = """package main

import "fmt"

type Server struct {
	Addr string
}

func (s *Server) Start(port int) error {
	fmt.Println(s.Addr)
	return nil
}
"""
    assert spans(src, "go") == [("type", "Server", 5, 7), ("function", "Start", 9, 12)]
    assert chunk_text(src, "go")[1].signature == "func (s *Server) Start(port int) error"


def test_rust() -> None:
    src = """use std::io;

pub struct Point { x: i32, y: i32 }

impl Point {
    pub fn new(x: i32, y: i32) -> Self { Point { x, y } }
}

fn main() {
    let p = Point::new(1, 2);
}
"""
    assert spans(src, "rust") == [("type", "Point", 3, 3), ("class", "Point", 5, 7), ("function", "main", 9, 11)]


def test_java() -> None:
    src = """package a;

public class Greeter {
    private final String name;
    public Greeter(String name) { this.name = name; }
    public String greet(String other) {
        return "Hello " + other + " from " + name;
    }
}
"""
    assert spans(src, "java") == [("class", "Greeter", 3, 9)]


def test_c_and_cpp() -> None:
    c_src = """#include <stdio.h>

struct point { int x; int y; };

static int add(int a, int b) {
    return a + b;
}
"""
    assert spans(c_src, "c") == [("type", "point", 3, 3), ("function", "add", 5, 7)]
    cpp_src = """#include <vector>
namespace geo {
template <typename T>
T square(T x) { return x * x; }
}
"""
    assert spans(cpp_src, "cpp") == [("type", "geo", 2, 5)]


@pytest.mark.parametrize("language", ["text", "markdown", "kotlin"])
def test_languages_without_grammar_use_windows(language: str) -> None:
    src = "\n".join(f"line {i} of a document without any grammar at all" for i in range(150))
    chunks = chunk_text(src, language)
    assert all(c.kind == "window" for c in chunks)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 150
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start_line <= before.end_line + 1  # windows overlap or touch: nothing is lost


def test_broken_code_still_chunks() -> None:
    assert chunk_text("def broken(:\n    return ???\n" * 3, "python")
    assert chunk_text("", "python") == []
    assert isinstance(chunk_text("x = 1\n" * 20, "python")[0], ChunkSpan)
