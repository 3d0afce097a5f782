#!/bin/sh
# Copies the pinned files out of node_modules after `npm ci --ignore-scripts`
# (run in this directory). The copies are checked in and embedded: building
# or running the silo needs neither npm nor the network.
set -eu
cd "$(dirname "$0")"
cp node_modules/htmx.org/dist/htmx.min.js htmx.min.js
cp node_modules/uplot/dist/uPlot.iife.min.js uPlot.iife.min.js
cp node_modules/uplot/dist/uPlot.min.css uPlot.min.css
cp node_modules/htmx.org/LICENSE LICENSE.htmx
cp node_modules/uplot/LICENSE LICENSE.uplot
